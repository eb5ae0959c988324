package boltstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A second compaction in the same directory is refused while one runs,
// and leaves the file as it was: two renames over one path could leave a
// server writing to a file with no name.
func TestCompact_AnotherInTheDirectory_Refused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "paymentsd.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	running, err := os.Open(dir) // the lock a running compaction holds
	if err != nil {
		t.Fatal(err)
	}
	if !lockExclusive(running) {
		t.Fatal("the directory's lock is taken")
	}
	if _, _, err := Compact(path, time.Second); !errors.Is(err, ErrCompacting) {
		t.Fatalf("Compact beside a running one: %v, want ErrCompacting", err)
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) || after.Size() != before.Size() {
		t.Fatalf("the file changed: %v", err)
	}
	running.Close()
	if _, _, err := Compact(path, time.Second); err != nil {
		t.Fatalf("Compact once the other ended: %v", err)
	}
}
