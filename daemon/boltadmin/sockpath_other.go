//go:build !linux

package boltadmin

import "fmt"

// shortSocketPath returns path, which must fit sockaddr_un's sun_path.
func shortSocketPath(path string) (addr string, done func(), err error) {
	if len(path) >= maxSocketPath {
		return "", nil, fmt.Errorf("socket path %s: longer than %d bytes, too long for a Unix socket; use a shorter --db path", path, maxSocketPath-1)
	}
	return path, func() {}, nil
}

// maxSocketPath is the smallest sun_path of the systems Go supports (104 on
// the BSDs and macOS).
const maxSocketPath = 104
