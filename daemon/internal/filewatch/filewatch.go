// Package filewatch tells when files change, by looking at them. It polls
// each file's identity: device, inode, size, modification and change
// times, and mode. A poll sees a file written in place, replaced by a
// rename, or swapped behind a symbolic link. The last is how Kubernetes
// updates a mounted secret. It needs no platform notification API, and has
// no event to lose.
package filewatch

import (
	"context"
	"os"
	"syscall"
	"time"
)

// stamp is what a file looks like from outside. A change to the file
// changes it.
type stamp struct {
	exists       bool
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds; ctime changes on every write, even one that sets mtime back
	mode         os.FileMode
}

func look(path string) stamp {
	info, err := os.Stat(path) // through links: the file served is the target
	if err != nil {
		return stamp{}
	}
	s := stamp{exists: true, size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino, s.ctime = uint64(st.Dev), st.Ino, st.Ctim.Nano()
	}
	return s
}

// Watcher watches a set of files.
type Watcher struct {
	paths []string
	last  []stamp
}

// New takes a first look at paths. Run sees any change made after New
// returns, even one made before Run starts.
func New(paths ...string) *Watcher {
	w := &Watcher{paths: paths, last: make([]stamp, len(paths))}
	for i, p := range paths {
		w.last[i] = look(p)
	}
	return w
}

// Run looks at the paths every interval until ctx ends. It calls changed
// once they have changed since the last call, or since New, and then stood
// still for one look. Files replaced one after the other, such as a key and
// then its certificate, are thus read once, together, not half-replaced.
func (w *Watcher) Run(ctx context.Context, interval time.Duration, changed func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		moved := false
		for i, p := range w.paths {
			if s := look(p); s != w.last[i] {
				w.last[i], moved = s, true
			}
		}
		switch {
		case moved:
			pending = true
		case pending:
			pending = false
			changed()
		}
	}
}
