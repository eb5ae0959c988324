package boltstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// readMeta reads bbolt's meta page, whose layout bbolt does not export.
// This test pins that layout to what bbolt's public API says of a real
// file. A bbolt whose layout moved fails here, loudly, instead of in the
// diagnosis of a damaged file. (A panic's frames, which recovered reads,
// are pinned by TestServing_DamagedPages_ErrorsNotPanicsHealthReportsIt.)
func TestReadMeta_AgreesWithBboltsPublicAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pin.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // enough to grow the file past its first pages
		err := b.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("pin"))
			if err != nil {
				return err
			}
			return bk.Put(fmt.Appendf(nil, "k%03d", i), make([]byte, 2000))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var txid int
	var size int64
	b.View(func(tx *bolt.Tx) error { txid, size = tx.ID(), tx.Size(); return nil })
	pageSize := b.Info().PageSize
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0, err0 := readMeta(f, 0)
	m1, err1 := readMeta(f, int64(pageSize))
	if err0 != nil || err1 != nil {
		t.Fatalf("bbolt's meta pages do not read as damage.go expects (%v; %v): re-derive its layout constants from this bbolt", err0, err1)
	}
	m := max(m0.txid, m1.txid)
	newer := m0
	if m1.txid == m {
		newer = m1
	}
	switch {
	case int(newer.pageSize) != pageSize:
		t.Errorf("meta page size %d, bbolt says %d", newer.pageSize, pageSize)
	case int(m) != txid:
		t.Errorf("meta transaction id %d, bbolt says %d", m, txid)
	case int64(newer.pages)*int64(newer.pageSize) != size:
		t.Errorf("meta high-water mark %d pages of %d bytes, bbolt says the file holds %d bytes", newer.pages, newer.pageSize, size)
	case newer.root >= newer.pages || newer.freelist >= newer.pages:
		t.Errorf("meta root %d and freelist %d, not within %d pages", newer.root, newer.freelist, newer.pages)
	}
	if err := checkFileSize(path); err != nil {
		t.Errorf("checkFileSize of a sound file: %v", err)
	}
}
