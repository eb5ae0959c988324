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
	path := filepath.Join(dir, "keys")
	write := func(p, content string) {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "one")
	w := filewatch.New(path)
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 10*time.Millisecond, func() { changed <- struct{}{} })

	expect := func(what string) {
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
	write(path, "two, longer")
	expect("written in place")
	tmp := filepath.Join(dir, "keys.tmp")
	write(tmp, "three, same size")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	expect("renamed over")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("mode changed")
	// As Kubernetes updates a secret: the file is a link into a directory
	// that a link swap replaces.
	target := filepath.Join(dir, "data-1", "keys")
	os.Mkdir(filepath.Dir(target), 0o700)
	write(target, "four")
	// Swapped in at once, as ln -s then mv does: a remove and a link
	// made apart are two changes, and a loaded machine may see both.
	link := filepath.Join(dir, "keys.link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link, path); err != nil {
		t.Fatal(err)
	}
	expect("replaced by a link")
	os.Remove(path)
	expect("removed")

	// Written again with its old modification time kept (cp -p, rsync -t).
	write(path, "five")
	expect("written anew")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	expect("times set back")
	write(path, "six!")
	os.Chtimes(path, old, old)
	expect("same size, same modification time")

	// Two files replaced one after the other, within a look: one call.
	other := filepath.Join(dir, "cert")
	write(other, "a")
	w2 := filewatch.New(path, other)
	calls := make(chan struct{}, 16)
	go w2.Run(ctx, 50*time.Millisecond, func() { calls <- struct{}{} })
	write(path, "key two")
	time.Sleep(20 * time.Millisecond)
	write(other, "cert two")
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
