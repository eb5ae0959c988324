package safefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/safefile"
)

func TestRead_RefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{fifo: "a FIFO", link: "a FIFO", dir: "a directory", "/dev/null": "a character device"} {
		done := make(chan error, 1)
		go func() { _, err := safefile.ReadPrivate(path); done <- err }()
		select {
		case err := <-done:
			var nr *safefile.NotRegularError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), kind+", not a regular file") {
				t.Errorf("%s: %v, want it named %s", path, err, kind)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still reading after 5 s; it must be refused at once", path)
		}
	}
}

func TestReadPrivate_RefusesAFileOthersCanWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o644: true, 0o640: true, 0o620: false, 0o602: false, 0o666: false} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		b, err := safefile.ReadPrivate(path)
		if ok != (err == nil) {
			t.Errorf("mode %04o: %q, %v", mode, b, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "chmod go-w")) {
			t.Errorf("mode %04o: error %v does not say how to mend it", mode, err)
		}
		if _, err := safefile.Read(path); err != nil {
			t.Errorf("Read, mode %04o: %v; only ReadPrivate looks at the mode", mode, err)
		}
	}
}

func TestRead_RefusesAHugeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, safefile.MaxSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.Read(path); err == nil {
		t.Error("read a file larger than MaxSize")
	}
}

// Whoever could replace a private file could let themselves in: its owner
// and every directory above it, and above a link to it, count too.
func TestReadPrivate_RefusesWhatOthersCouldReplace(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to give a file to another user; CI runs as root")
		}
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := func(d string) string {
		t.Helper()
		p := filepath.Join(d, "keys")
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	safe := file(mk("safe", 0o755))
	sticky := file(mk("sticky", 0o777|os.ModeSticky))
	open := file(mk("open", 0o777))
	groupOpen := file(mk("group-open", 0o770))
	inner := file(mk("open-above/inner", 0o700))
	os.Chmod(filepath.Join(dir, "open-above"), 0o777)
	theirs := file(mk("theirs", 0o755))
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	theirDir := mk("their-dir", 0o755)
	ownedFile := file(theirDir)
	if err := os.Chown(theirDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	linkDir := mk("link-in-open", 0o777)
	link := filepath.Join(linkDir, "keys-link")
	if err := os.Symlink(safe, link); err != nil {
		t.Fatal(err)
	}
	// A link among the directories: the directory it leads into counts.
	throughLink := filepath.Join(mk("via", 0o755), "dir-link")
	if err := os.Symlink(filepath.Dir(open), throughLink); err != nil {
		t.Fatal(err)
	}
	throughLink = filepath.Join(throughLink, "keys")
	safeLink := filepath.Join(mk("safe-links", 0o755), "keys-link")
	if err := os.Symlink(sticky, safeLink); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		safe:        "",
		sticky:      "",
		safeLink:    "",
		open:        "directory is writable by group or others (mode 0777)",
		groupOpen:   "directory is writable by group or others (mode 0770)",
		inner:       "directory is writable by group or others (mode 0777)",
		theirs:      "belongs to uid 65534",
		ownedFile:   "belongs to uid 65534",
		link:        "directory is writable by group or others (mode 0777)",
		throughLink: "directory is writable by group or others (mode 0777)",
	} {
		_, err := safefile.ReadPrivate(path)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want it read", path, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", path, err, want)
		}
	}
}
