// Package dirsync makes a directory's entries durable. A file created,
// linked or renamed into a directory survives a crash only once the
// directory is synced too.
package dirsync

import "os"

// Sync syncs the directory dir.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
