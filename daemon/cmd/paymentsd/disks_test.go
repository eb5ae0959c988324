package main

// Data files made, damaged and starved: big files, dd and truncate, a
// tmpfs filled up, fsyncs slowed or failed by strace.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
)

// bigDataFile writes its principal's, wantOneIntentPerAmount counts them.
const hostileToken = "hostile-token"

// wantOneIntentPerAmount checks that hostileToken's intents, one amount per
// key in these tests, hold each amount once, and returns how many there are.
func wantOneIntentPerAmount(t *testing.T, d *daemon) int {
	t.Helper()
	byAmount := map[string]int{}
	for _, pi := range d.list(t, hostileToken) {
		byAmount[pi.Amount]++
	}
	for amount, n := range byAmount {
		if n != 1 {
			t.Errorf("amount %s: %d intents, want 1", amount, n)
		}
	}
	return len(byAmount)
}

// noDataDir fails t if dir, the --db's directory, exists.
func noDataDir(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("data directory %s: stat %v, entries %v; want it never created", dir, err, entries)
	}
}

// bigDataFile writes a paymentsd data file of at least 16 MiB: 2,000 intents
// of the principal of hostileToken, and 16 MiB of an embedder's data.
func bigDataFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	intents, err := boltintents.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	owner := devPrincipal(hostileToken)
	for i := range 2000 {
		pi := &paymentsv1.PaymentIntent{Id: fmt.Sprintf("pi_%024x", i), State: paymentsv1.State_STATE_CREATED, Version: 1,
			Amount: strconv.Itoa(i + 1), CreateTime: timestamppb.Now(), ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}
		if err := intents.CreateIntent(ctx, owner, "", pi); err != nil {
			t.Fatal(err)
		}
	}
	bolttest.Fill(t, db, "filler", 16)
	db.Close()
	if info, err := os.Stat(path); err != nil || info.Size() < 16<<20 {
		t.Fatalf("data file of %d bytes (%v), want at least 16 MiB", info.Size(), err)
	}
	return path
}

// filePages is the number of whole 4 KiB pages of the file at path.
func filePages(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() / 4096
}

// damageWithDD zeroes count 4 KiB pages of path from page seek, with dd.
func damageWithDD(t *testing.T, path string, seek, count int64) {
	t.Helper()
	out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4096", "conv=notrunc",
		fmt.Sprint("seek=", seek), fmt.Sprint("count=", count)).CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
}

// truncate cuts path to size bytes with truncate(1).
func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if out, err := exec.Command("truncate", "-s", fmt.Sprint(size), path).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v %s", err, out)
	}
}

// mountTmpfs mounts a tmpfs of size (as mount's size= takes it) on a new
// directory under t.TempDir() and unmounts it when the test ends. Cleanups
// run last first, so a daemon started after this has been killed by then.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v\n%s(the disk-full test needs root and mount)", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			exec.Command("umount", "-l", dir).Run() // do not leave it mounted
		}
	})
	return dir
}

// fillUntilFull writes a filler file in dir until the file system refuses
// a page with ENOSPC, and returns its path.
func fillUntilFull(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err = f.Write(page); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return path
}

// ---- Slow disks: strace on a running daemon ----

// slowFsync attaches strace to d, delaying every fdatasync and fsync of
// the real binary by delay, and detaches when the test ends.
func slowFsync(t *testing.T, d *daemon, delay time.Duration) {
	t.Helper()
	us := fmt.Sprint(delay.Microseconds())
	t.Cleanup(attachStrace(t, d, "-e", "trace=fdatasync,fsync", "-e", "inject=fdatasync:delay_enter="+us, "-e", "inject=fsync:delay_enter="+us))
}

// attachStrace attaches strace with args to d's threads, and returns the
// func that detaches it, leaving paymentsd running.
func attachStrace(t *testing.T, d *daemon, args ...string) (detach func()) {
	t.Helper()
	cmd := exec.Command("strace", append([]string{"-f", "-p", strconv.Itoa(d.cmd.Process.Pid), "-o", "/dev/null"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	detach = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), "attached") {
				once.Do(func() { close(attached) })
			}
		}
	}()
	select {
	case <-attached:
		time.Sleep(100 * time.Millisecond) // the other threads
	case <-time.After(30 * time.Second):
		detach()
		t.Fatal("strace did not attach")
	}
	return detach
}
