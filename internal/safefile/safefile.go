// Package safefile opens the files paymentsd is told to read only when they
// are regular files. Such files are key files, certificates and the data
// file for the operator commands. A FIFO, a device or a directory named by
// mistake is thus refused at once. It cannot hang the process. Files that
// grant access are read only when no one but their owner can change them.
package safefile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// MaxSize is the largest file Read reads. It is far more than any key or
// certificate file needs. It is also small enough that a wrong path cannot
// exhaust memory.
const MaxSize = 16 << 20

// Open opens path for reading if it is a regular file, following symbolic
// links. It opens the file without waiting (O_NONBLOCK) and checks it
// through its descriptor. So a FIFO neither blocks the open nor slips in
// between a check and the open.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: info.Mode()}
	}
	return f, nil
}

// Read reads path, a regular file of at most MaxSize bytes.
func Read(path string) ([]byte, error) { return read(path, false) }

// ReadPrivate reads path, a regular file that grants access, such as API
// keys, a private key or a CA. It refuses the file when anyone but this
// process's user and root could change what it reads. Whoever can change it
// can let themselves in. So, as with ssh's StrictModes, this user or root
// must own the file. No group or others may write it. So too for every
// directory above it, and above each link on the way to it. Others may
// write a directory with the sticky bit, such as /tmp. In it, they cannot
// replace what they do not own.
func ReadPrivate(path string) ([]byte, error) {
	if err := checkDirs(path); err != nil {
		return nil, err
	}
	return read(path, true)
}

func read(path string, private bool) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if private {
		if err := checkOwner(path, info, false); err != nil {
			return nil, err
		}
	}
	if info.Size() > MaxSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a key or certificate file may be", path, info.Size(), MaxSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%s is more than the %d bytes a key or certificate file may be", path, MaxSize)
	}
	return b, nil
}

// NotRegularError is a path that names something other than a regular
// file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, e.Kind())
}

// Kind names what the path is: "a directory", "a FIFO", ...
func (e *NotRegularError) Kind() string {
	switch m := e.Mode; {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "an irregular file"
	}
}

// checkOwner refuses info if a user other than this process's and root
// owns it. The info is of the file at path, or of a directory on the way to
// it. It also refuses info if group or others may write it. A directory
// with the sticky bit is exempt from that.
func checkOwner(path string, info fs.FileInfo, dir bool) error {
	what := "file"
	if dir {
		what = "directory"
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		if uid := int(st.Uid); uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("%s: the %s %s belongs to uid %d, neither this process's user (uid %d) nor root, who could change it to let themselves in", path, what, info.Name(), uid, os.Geteuid())
		}
	}
	mode := info.Mode()
	if mode.Perm()&0o022 == 0 || (dir && mode&fs.ModeSticky != 0) {
		return nil
	}
	if dir {
		return fmt.Errorf("%s: its directory is writable by group or others (mode %04o), who could put another file in its place; chmod go-w the directory", path, mode.Perm())
	}
	return fmt.Errorf("%s is writable by group or others (mode %04o): whoever can write it can let themselves in; chmod go-w %s", path, mode.Perm(), path)
}

// checkDirs checks, with checkOwner, every directory that resolving path
// enters. It resolves path one name at a time, as the kernel does. A
// symbolic link met on the way, the file's own or a directory's, is
// followed from where it stands. So the directories that hold each link are
// checked, as well as those above the file.
func checkDirs(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	cur := "/"
	info, err := os.Stat(cur)
	if err != nil {
		return err
	}
	if err := checkOwner(path, info, true); err != nil {
		return err
	}
	rest := strings.Split(abs, "/")
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		info, err := os.Lstat(next)
		if err != nil {
			return nil // Open reports a missing file or directory
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if links++; links > 40 {
				return fmt.Errorf("%s: too many levels of symbolic links", path)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if len(rest) == 0 || !info.IsDir() {
			return nil // the file itself, which read checks through its descriptor
		}
		if err := checkOwner(path, info, true); err != nil {
			return err
		}
		cur = next
	}
	return nil
}
