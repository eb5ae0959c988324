//go:build !linux

package boltstore

import "os"

const mmapFlags = 0

// unlock does nothing here: closing f releases bbolt's lock, or, where a
// mapping of the file keeps it, the process's exit does.
func unlock(*os.File) {}
