//go:build !linux

package boltstore

import "os"

const mmapFlags = 0

// unlock does nothing here. Closing f releases bbolt's lock. Where a
// mapping of the file keeps the lock, the process's exit releases it.
func unlock(*os.File) {}

// lockExclusive takes nothing here: compactions of one directory are
// not kept apart.
func lockExclusive(*os.File) bool { return true }
