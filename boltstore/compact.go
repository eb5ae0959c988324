package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/internal/dirsync"
)

// compactTxSize bounds what one transaction of Compact copies. So a file
// of any size is compacted in bounded memory.
const compactTxSize = 64 << 20

// Compact rewrites the data file at path with every page full and no free
// pages, and returns its sizes before and after. A file that bbolt never
// shrinks then takes what its live data needs. The process must not be
// serving the file. Compact holds the file's lock throughout, so a server
// cannot open it meanwhile. When a server holds it, Compact fails with
// ErrLocked within lockTimeout and changes nothing.
//
// The file is checked first, as OpenReadOnly does: a damaged file is left
// as it is. The copy is written beside path under a temporary name, with
// the file's mode. It is synced and checked, then renamed over path.
func Compact(path string, lockTimeout time.Duration) (before, after int64, err error) {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved // the file is replaced, not a link to it
	}
	// Two compactions of one file would each rename their copy over it,
	// the second maybe after a server opened the first's: that server
	// would then write to a file with no name. So compactions of a
	// directory are kept apart, and each checks, before its rename, that
	// the path still names the file it copied.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return 0, 0, err
	}
	defer dir.Close()
	if !lockExclusive(dir) {
		return 0, 0, ErrCompacting
	}
	src, err := OpenReadOnly(path, lockTimeout)
	if err != nil {
		return 0, 0, err
	}
	defer src.Close() // after the rename: no server opens the file meanwhile
	info, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".compact-*")
	if err != nil {
		return 0, 0, fmt.Errorf("write the compacted copy beside %s: %w", path, err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // nothing, once renamed
	if err := compactInto(tmp.Name(), src.bolt, info.Mode().Perm()); err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := checkCompacted(tmp.Name()); err != nil {
		return 0, 0, fmt.Errorf("compact %s: the copy does not check out, so the file was left as it was: %w", path, err)
	}
	copied, err := os.Stat(tmp.Name())
	if err != nil {
		return 0, 0, err
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(info, now) {
		return 0, 0, fmt.Errorf("compact %s: the file was replaced while it was copied; nothing was renamed over it", path)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, 0, err
	}
	return info.Size(), copied.Size(), dirsync.Sync(filepath.Dir(path))
}

// compactInto copies src into a new bbolt file at dst, with mode perm, and
// syncs it.
func compactInto(dst string, src *bolt.DB, perm os.FileMode) error {
	if err := os.Chmod(dst, perm); err != nil {
		return err
	}
	b, err := bolt.Open(dst, perm, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = bolt.Compact(b, src, compactTxSize) // each of its commits is synced
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync() // the file's length too, whatever bbolt left to sync
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkCompacted checks the copy as Open would, and every sealed value.
func checkCompacted(path string) error {
	ro, err := OpenReadOnly(path, time.Second)
	if err != nil {
		return err
	}
	defer ro.Close()
	return ro.Check()
}

// ErrCompacting: another Compact runs in the file's directory.
var ErrCompacting = errors.New("another paymentsd compact runs in this directory; wait for it")

// errReplaced: the file at the path Open opened was replaced each time it
// took the lock. See openLatest.
var errReplaced = errors.New("the data file was replaced while its lock was awaited")
