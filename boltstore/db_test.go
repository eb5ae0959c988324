package boltstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
)

func TestOpen_CreatesPrivateFileAndDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
}

func TestOpen_FileInUse_FailsNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// bbolt's flock is per open file description, so a second Open in this
	// process contends like a second process would.
	_, err = boltstore.Open(path, &boltstore.Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, boltstore.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open = %v, want ErrLocked naming %s", err, path)
	}
}

// A path that names a directory is not a damaged data file: no backup
// would help, and the error says what it is.
func TestOpen_Directory_NotADataFileNorDamage(t *testing.T) {
	dir := t.TempDir()
	_, err := boltstore.Open(dir, nil)
	if err == nil || errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Open(a directory) = %v, want an error saying it is a directory, not damage", err)
	}
	if _, err := boltstore.OpenReadOnly(dir, 0); err == nil || errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("OpenReadOnly(a directory) = %v, want an error that is not damage", err)
	}
}

// A data file's path may be a symbolic link to where the file is to be:
// the file is made there.
func TestOpen_SymlinkToNoFile_FileMadeWhereItPoints(t *testing.T) {
	target := filepath.Join(t.TempDir(), "disk", "paymentsd.db") // its directory made too
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if info, err := os.Stat(target); err != nil || info.Size() == 0 {
		t.Errorf("the link's target: %v, %v; want the data file", info, err)
	}
}
