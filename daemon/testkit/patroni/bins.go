package patroni

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// findBins finds patroni, patronictl and etcd on PATH, and PostgreSQL's
// directory. A missing one is errMissing, with the package to install.
func (c *Cluster) findBins() error {
	for _, b := range []struct {
		dst       *string
		name, pkg string
	}{
		{&c.patroniBin, "patroni", "patroni"},
		{&c.ctlBin, "patronictl", "patroni"},
		{&c.etcdBin, "etcd", "etcd-server"},
	} {
		p, err := exec.LookPath(b.name)
		if err != nil {
			return fmt.Errorf("patroni: %w: no %s on PATH (apt-get install %s)", errMissing, b.name, b.pkg)
		}
		*b.dst = p
	}
	var err error
	c.pgBin, err = findPGBin()
	return err
}

// findPGBin finds the directory of initdb, pg_ctl and postgres: PATH
// first, else the newest /usr/lib/postgresql/*/bin (Debian's place). As
// pgtest's findBin, which is not exported.
func findPGBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); complete(dir) {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		return v
	}
	slices.SortFunc(matches, func(a, b string) int {
		va, vb := version(a), version(b)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, m := range matches {
		if dir := filepath.Dir(m); complete(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("patroni: %w: no initdb on PATH or in /usr/lib/postgresql/*/bin (apt-get install postgresql)", errMissing)
}

// complete reports whether dir holds every PostgreSQL program Patroni
// runs.
func complete(dir string) bool {
	for _, prog := range []string{"initdb", "pg_ctl", "postgres", "pg_basebackup", "pg_rewind", "pg_controldata"} {
		if fi, err := os.Stat(filepath.Join(dir, prog)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// traversable reports whether every directory from dir up to / lets
// others through. The postgres user needs that to reach a data directory
// there.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// sweep kills the processes of the clusters left in base by test
// binaries that died without stopping them (a go test timeout, a kill),
// and removes their directories. Their pid, in the directory's name, is
// gone. Killed runs thus do not pile up clusters.
func sweep(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		root := filepath.Join(base, e.Name())
		killStray(root + "/")
		os.RemoveAll(root)
	}
}
