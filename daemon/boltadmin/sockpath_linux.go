package boltadmin

import (
	"fmt"
	"os"
	"path/filepath"
)

// shortSocketPath returns an address for the Unix socket at path that fits
// sockaddr_un's 108 bytes. That is path itself when it fits. Otherwise it
// is the same file, reached through /proc/self/fd and an open descriptor
// of its directory. So a data file deep in a volume still gets its socket.
// Call done once bound or connected.
func shortSocketPath(path string) (addr string, done func(), err error) {
	if len(path) < maxSocketPath {
		return path, func() {}, nil
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	if len(addr) >= maxSocketPath {
		dir.Close()
		return "", nil, fmt.Errorf("socket path %s: its name is too long for a Unix socket", path)
	}
	return addr, func() { dir.Close() }, nil
}

// maxSocketPath is the size of sockaddr_un's sun_path, its NUL included.
const maxSocketPath = 108
