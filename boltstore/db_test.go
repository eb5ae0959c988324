package boltstore_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// A new file in a directory the process cannot write is refused naming
// the directory and who needs to write there, not the temporary file the
// store writes first. Root writes anywhere its file system lets it, so
// as root the directory is a read-only tmpfs.
func TestOpen_UnwritableDirectory_NamesItAndTheUser(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount a read-only tmpfs (root is needed): %v\n%s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", dir).Run() })
	}
	_, err := boltstore.Open(filepath.Join(dir, "paymentsd.db"), nil)
	if err == nil {
		t.Fatal("Open in an unwritable directory: nil error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "its directory "+dir+" must be writable by ") || !strings.Contains(msg, fmt.Sprintf("uid %d", os.Geteuid())) || strings.Contains(msg, ".new-") {
		t.Fatalf("Open in an unwritable directory: %q; want the directory and the user named, no temporary file", msg)
	}
}
