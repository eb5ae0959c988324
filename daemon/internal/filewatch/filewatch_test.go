package filewatch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/internal/filewatch"
)

func TestRun_SeesEveryKindOfChange(t *testing.T) {
	dir := t.TempDir()
	s := &watched{dir: dir, path: filepath.Join(dir, "keys")}
	writeFile(t, s.path, "one")
	w := filewatch.New(s.path)
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 10*time.Millisecond, func() { changed <- struct{}{} })

	for _, c := range fileChanges {
		c.change(t, s)
		expectOneChange(t, changed, c.what)
	}
	pairReplacedWithinALook(t, ctx, s)
}

// watched is the watched file, and what the changes to it share.
type watched struct {
	dir, path string
	old       time.Time // a modification time set back, kept by later writes
}

// fileChanges are the changes to a watched file, each to be seen once, in
// order: each starts from the file the one before left.
var fileChanges = []struct {
	what   string
	change func(t *testing.T, s *watched)
}{
	{"written in place", func(t *testing.T, s *watched) { writeFile(t, s.path, "two, longer") }},
	{"renamed over", func(t *testing.T, s *watched) {
		tmp := filepath.Join(s.dir, "keys.tmp")
		writeFile(t, tmp, "three, same size")
		if err := os.Rename(tmp, s.path); err != nil {
			t.Fatal(err)
		}
	}},
	{"mode changed", func(t *testing.T, s *watched) {
		if err := os.Chmod(s.path, 0o644); err != nil {
			t.Fatal(err)
		}
	}},
	// As Kubernetes updates a secret: the file is a link into a directory
	// that a link swap replaces.
	{"replaced by a link", func(t *testing.T, s *watched) {
		target := filepath.Join(s.dir, "data-1", "keys")
		os.Mkdir(filepath.Dir(target), 0o700)
		writeFile(t, target, "four")
		// Swapped in at once, as ln -s then mv does: a remove and a link
		// made apart are two changes, and a loaded machine may see both.
		link := filepath.Join(s.dir, "keys.link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(link, s.path); err != nil {
			t.Fatal(err)
		}
	}},
	{"removed", func(t *testing.T, s *watched) { os.Remove(s.path) }},
	// Written again with its old modification time kept (cp -p, rsync -t).
	{"written anew", func(t *testing.T, s *watched) { writeFile(t, s.path, "five") }},
	{"times set back", func(t *testing.T, s *watched) {
		s.old = time.Now().Add(-time.Hour)
		os.Chtimes(s.path, s.old, s.old)
	}},
	{"same size, same modification time", func(t *testing.T, s *watched) {
		writeFile(t, s.path, "six!")
		os.Chtimes(s.path, s.old, s.old)
	}},
}

// pairReplacedWithinALook checks that two files replaced one after the
// other, within a look, make one call.
func pairReplacedWithinALook(t *testing.T, ctx context.Context, s *watched) {
	t.Helper()
	other := filepath.Join(s.dir, "cert")
	writeFile(t, other, "a")
	w2 := filewatch.New(s.path, other)
	calls := make(chan struct{}, 16)
	go w2.Run(ctx, 50*time.Millisecond, func() { calls <- struct{}{} })
	writeFile(t, s.path, "key two")
	time.Sleep(20 * time.Millisecond)
	writeFile(t, other, "cert two")
	select {
	case <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("the pair replaced: no change seen")
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(calls); n != 0 {
		t.Errorf("the pair replaced within a look: %d more calls, want one in all", n)
	}
}

// expectOneChange waits for the change what to be seen, then fails if a
// few looks at rest see it again.
func expectOneChange(t *testing.T, changed chan struct{}, what string) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no change seen", what)
	}
	time.Sleep(30 * time.Millisecond) // a few looks at rest
	select {
	case <-changed:
		t.Fatalf("%s: seen twice", what)
	default:
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
