package boltstore

import (
	"os"
	"syscall"
)

// mmapFlags prefaults the file's pages when bbolt maps it, as etcd does.
// Reads then never take a page fault. So a lookup in a large file costs
// about what it does in a small one.
const mmapFlags = syscall.MAP_POPULATE

// unlock releases bbolt's lock on f. Closing f alone would not, while
// bbolt's mapping of the file still refers to it.
func unlock(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// lockExclusive takes f's exclusive flock without waiting. It reports
// false when another holds it.
func lockExclusive(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
