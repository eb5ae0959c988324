package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A file whose records expired and were swept keeps its size: bbolt never
// shrinks it. paymentsd compact does, once the server is stopped. The
// compacted file opens and replays a live record byte for byte. A server
// running on the file has compact refused, with nothing changed.
func TestCompact_ShrinksASweptFile_RefusesOneInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "paymentsd.db")
	const expiring = 600
	sweptFile(t, path, expiring)

	// One live record, as a server with the default TTL stores it.
	d := start(t, spec{db: path})
	live := d.createSeed("merchant-demo", "live", "7")
	if live.err != nil {
		t.Fatal(live.err)
	}
	want := deterministic(t, live.resp)
	sizeBefore := compactRefusedInUse(t, d, path)

	// Stopped, the file shrinks, keeps its mode and leaves nothing beside it.
	paymentsd(t, "", "compact", "--db", path).want(t, 0, "compacted from")
	if after := fileSize(t, path); after >= sizeBefore {
		t.Fatalf("compacted file %d bytes, was %d: want it smaller", after, sizeBefore)
	} else {
		t.Logf("%d bytes, compacted from %d", after, sizeBefore)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("compacted file: %v, %v; want mode 0600", info.Mode(), err)
	}
	if got := dirEntries(t, dir); !slices.Equal(got, []string{"paymentsd.db"}) {
		t.Fatalf("left beside the file: %q", got)
	}
	paymentsd(t, "", "check", "--db", path).want(t, 0, "sound")

	// The compacted file serves the live record's replay, byte for byte.
	d = start(t, spec{db: path})
	again := d.createSeed("merchant-demo", "live", "7")
	if again.err != nil || !again.replayed() {
		t.Fatalf("replay from the compacted file: %v (replayed %t)", again.err, again.replayed())
	}
	if got := deterministic(t, again.resp); string(got) != string(want) {
		t.Fatalf("replay %x, want %x", got, want)
	}
	if n := len(d.list(t, "merchant-demo")); n != expiring+1 {
		t.Fatalf("%d intents after compacting, want %d", n, expiring+1)
	}
}

// sweptFile makes path a file of n records that expired within a second
// and were swept every 50ms, and stops its server.
func sweptFile(t *testing.T, path string, n int) {
	t.Helper()
	d := start(t, spec{db: path, args: []string{"--ttl", "1s", "--lease", "500ms", "--sweep-interval", "50ms"}})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if a := d.createSeed("merchant-demo", fmt.Sprint("expiring-", i), "5"); a.err != nil {
					errs <- a.err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); swept(d) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records swept:\n%s", swept(d), n, d.stderr())
		}
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}

// compactRefusedInUse: compact is refused while d runs on path: exit 1,
// the file and its directory as they were, the server serving on, its
// live record replayed. It stops d, and returns the file's size.
func compactRefusedInUse(t *testing.T, d *daemon, path string) int64 {
	t.Helper()
	dir := filepath.Dir(path)
	sizeBefore, entries := fileSize(t, path), dirEntries(t, dir)
	held, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	paymentsd(t, "", "compact", "--db", path).want(t, 1, "in use by a running paymentsd", "Nothing was changed")
	now, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(held, now) || fileSize(t, path) != sizeBefore || !slices.Equal(dirEntries(t, dir), entries) {
		t.Fatalf("the refused compact changed the file or its directory: %d bytes, was %d; %q, was %q",
			fileSize(t, path), sizeBefore, dirEntries(t, dir), entries)
	}
	if again := d.createSeed("merchant-demo", "live", "7"); again.err != nil || !again.replayed() {
		t.Fatalf("after the refused compact: %v (replayed %t)", again.err, again.replayed())
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	return sizeBefore
}

// swept is how many records d's log says it swept.
func swept(d *daemon) int {
	n := 0
	for _, l := range d.lines("swept expired idempotency records") {
		count, _ := l["count"].(float64)
		n += int(count)
	}
	return n
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// dirEntries lists dir's names but the admin socket's, which comes and
// goes with the server.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sock") {
			names = append(names, e.Name())
		}
	}
	return names
}
