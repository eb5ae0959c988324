package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// health is what the DB knows of its file. The file is damaged for good
// once a damaged page was met. It is failing while commits fail, as on a
// full or failing disk.
type health struct {
	mu       sync.Mutex
	damaged  error
	failing  error
	poisoned bool // reads refused too
}

// poison stops the DB for good, for err. The DB then refuses reads as well
// as writes.
func (h *health) poison(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.damaged, h.poisoned = err, true
}

// readsRefused is the error for every read of a poisoned file.
func (h *health) readsRefused() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.poisoned {
		return h.damaged
	}
	return nil
}

func (h *health) damage(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.damaged == nil {
		h.damaged = err
	}
}

// committed records how a commit of the file ended.
func (h *health) committed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = err
}

func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.damaged != nil {
		return h.damaged
	}
	return h.failing
}

func (h *health) damagedErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.damaged
}

// Health returns nil while the DB can serve. Once the DB met a damaged
// page, Health returns an ErrDamaged until the file is checked and
// reopened. After a commit whose outcome is unknown, it returns that
// failure until a restart. While commits fail, it returns the error of the
// last commit. A load balancer should drain an instance whose store is
// unhealthy.
func (db *DB) Health() error { return db.health.err() }

// probeSize is what Probe writes beside the data file. It is room for a
// commit that grows the file by a few pages.
const probeSize = 64 << 10

// Probe learns whether commits work again after they failed. Health then
// reflects its outcome. Probe writes probeSize bytes to a scratch file
// beside the data file and syncs them. A commit that only reuses the
// file's free pages can succeed on a full disk. The next commit, which
// grows the file, would then fail. After the scratch file, Probe commits an
// empty transaction. It does nothing once the file is known to be damaged.
func (db *DB) Probe(ctx context.Context) error {
	if err := db.health.damagedErr(); err != nil {
		return err
	}
	if err := probeDisk(db.Path() + ".probe"); err != nil {
		db.health.committed(err)
		return err
	}
	err := db.update(ctx, func(*bolt.Tx) error { return nil })
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return db.Health()
}

func probeDisk(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("probe the disk: %w", err)
	}
	defer os.Remove(path)
	_, err = f.Write(make([]byte, probeSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("probe the disk: %w", err)
	}
	return nil
}
