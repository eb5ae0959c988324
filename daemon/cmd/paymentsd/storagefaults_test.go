package main

// Storage faults under the real binary on bbolt: a full disk, and an
// fdatasync that fails. Each must leave nothing stored that the caller was
// not told of, so that the key runs afresh or replays.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// TestE2E_DiskFull_CreateUnavailableNothingStoredKeyRunsFresh fills the file
// system under the real binary's data file.
//
// bbolt grows its file with ftruncate, after mapping it, so the new pages
// are holes: tmpfs allocates a page only when it is first written. Once the
// tmpfs is full, the pwrite of a page the file has never held fails with
// ENOSPC, and so does the commit (strace shows it): no fault injection is
// needed. A commit may still succeed first, by rewriting only pages the
// file already holds (pages freed by earlier commits, the meta pages); the
// test creates with new keys until one commit needs a new page (in
// practice the second).
func TestE2E_DiskFull_CreateUnavailableNothingStoredKeyRunsFresh(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	dbPath := filepath.Join(dir, "paymentsd.db")
	d := start(t, spec{db: dbPath})
	const token = "disk-full-token"

	first := d.createSeed(token, "order-before-full", "1")
	if first.err != nil {
		t.Fatalf("create before the disk is full: %v", first.err)
	}
	filler := fillUntilFull(t, dir)
	full := createUntilUnavailable(t, d, token)
	want := append([]string{intentID(first)}, full.ok...) // every intent answered OK

	// The caller learns that it may retry, not how the store failed.
	msg := status.Convert(full.failed.err).Message()
	for _, raw := range []string{"no space", "boltstore", "bbolt", "file"} {
		if strings.Contains(strings.ToLower(msg), raw) {
			t.Errorf("UNAVAILABLE message %q contains the store's text %q; want a plain message", msg, raw)
		}
	}
	// The log keeps the cause.
	lines := waitCreateLines(t, d, len(want)+1)
	if l := lines[len(want)]; l.Code != "Unavailable" || !strings.Contains(l.Err, "no space left on device") {
		t.Errorf("log line of the failed create: %+v; want code Unavailable with err naming %q", l, "no space left on device")
	}
	stillAnswersHealth(t, d, "after the disk filled")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	again := full.rerun(t, d, len(want))
	want = append(want, intentID(again))

	// The failed attempt left no intent: exactly the ones answered OK.
	slices.Sort(want)
	if got := ids(d.list(t, token)); !slices.Equal(got, want) {
		t.Errorf("intents stored %v; want exactly those answered OK %v", got, want)
	}
	// The failed commit left the file sound.
	if err := d.stop(t); err != nil {
		t.Errorf("paymentsd exited with %v after SIGTERM; want 0:\n%s", err, d.stderr())
	}
	wantSoundFile(t, dbPath, "after the disk filled")
}

// fullDisk is what creates on a full disk got: the intents of those
// answered OK, then the first refused UNAVAILABLE, its key and body.
type fullDisk struct {
	ok     []string
	token  string
	key    string
	body   *paymentsv1.CreatePaymentIntentRequest
	failed answer
}

// createUntilUnavailable creates with new keys until a commit needs a page
// the file lacks, and is refused UNAVAILABLE.
func createUntilUnavailable(t *testing.T, d *daemon, token string) fullDisk {
	t.Helper()
	full := fullDisk{token: token}
	for i := 1; full.key == ""; i++ {
		if i > 50 {
			t.Fatalf("50 creates succeeded on a full tmpfs; want UNAVAILABLE once a commit needs a page the file lacks")
		}
		key, body := fmt.Sprintf("order-full-%d", i), seedRequest(strconv.Itoa(100+i))
		a := d.create(withCreds(token, key), body)
		switch {
		case a.err == nil:
			t.Logf("create %d on the full tmpfs succeeded: its commit rewrote pages the file already held", i)
			full.ok = append(full.ok, intentID(a))
		case status.Code(a.err) == codes.Unavailable:
			full.key, full.body, full.failed = key, body, a
		default:
			t.Fatalf("create %d on the full tmpfs: %v, want OK or UNAVAILABLE", i, a.err)
		}
	}
	return full
}

// rerun sends the failed create again once space is back: a fresh run,
// attempt 1 (the failed claim released, not left in flight), and its
// replay after. before is the number of creates logged before the failed
// one.
func (full fullDisk) rerun(t *testing.T, d *daemon, before int) answer {
	t.Helper()
	again := d.create(withCreds(full.token, full.key), full.body)
	if again.err != nil || again.replayed() {
		t.Fatalf("same key once space is back: %v (replayed %t); want a fresh run that succeeds", again.err, again.replayed())
	}
	if l := waitCreateLines(t, d, before+2)[before+1]; l.Idempotency != "fresh" || l.Attempt != 1 {
		t.Errorf("log of the rerun: %s attempt %d; want fresh attempt 1 (the failed claim released, not left in flight)", l.Idempotency, l.Attempt)
	}
	replay := d.create(withCreds(full.token, full.key), full.body)
	if replay.err != nil || !replay.replayed() || intentID(replay) != intentID(again) {
		t.Errorf("retry after the rerun: %v (replayed %t); want the rerun's intent %s replayed", replay.err, replay.replayed(), intentID(again))
	}
	return again
}

// stillAnswersHealth fails t unless d answers a health check. (Whether it
// should say NOT_SERVING is another question; this only checks that it
// answers.)
func stillAnswersHealth(t *testing.T, d *daemon, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(d.dial(t, nil)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check %s: %v; want an answer", when, err)
	} else {
		t.Logf("health %s: %v", when, h.Status)
	}
}

// wantSoundFile fails t unless the bbolt file at path opens and checks
// sound.
func wantSoundFile(t *testing.T, path, when string) {
	t.Helper()
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatalf("data file does not open %s: %v", when, err)
	}
	defer db.Close()
	if err := db.Check(); err != nil {
		t.Errorf("data file damaged %s: %v", when, err)
	}
}

// A commit whose fdatasync fails after bbolt wrote its meta page may or may
// not be on disk: its caller is told the outcome is unknown and to retry
// with the same key, never that nothing was stored, and that retry, after
// a restart, answers with the one intent. A commit whose first fdatasync
// fails wrote no meta page: nothing was stored, and the key runs afresh.
// (strace fails the real system calls of the real binary.)
func TestE2E_FdatasyncFails_CallerToldWhatIsKnown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		when    string // which fdatasync of a thread fails, counted from the attach
		unknown bool
	}{
		{"after the meta page", "2", true},
		{"before the meta page", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "paymentsd.db")
			d := start(t, spec{db: path, args: []string{"--sweep-interval", "1h"}})
			var (
				a   answer
				key string
				req *paymentsv1.CreatePaymentIntentRequest
			)
			for attempt := 1; a.err == nil; attempt++ {
				// One create, one commit: its data and meta fdatasyncs. strace
				// counts them per thread, so the meta page's is the second only
				// when the committer's goroutine kept its thread; else again.
				if attempt > 20 {
					t.Fatal("20 commits went through: the fault never hit")
				}
				detach := attachStrace(t, d, "-e", "trace=fdatasync", "-e", "inject=fdatasync:error=EIO:when="+tc.when)
				key, req = fmt.Sprint("eio-", attempt), seedRequest(fmt.Sprint(1000+attempt))
				a = d.create(withCreds(hostileToken, key), req)
				detach()
			}
			t.Logf("the fault hit the commit of %s", key)
			retryAt := d
			if tc.unknown {
				wantStatusReason(t, a.err, codes.Unavailable, wire.ReasonOutcomeUnknown)
				// Until a restart, nothing is served, and callers are told to
				// retry, not that the data is damaged.
				if next := d.createSeed(hostileToken, "after-"+key, "1"); status.Code(next.err) != codes.Unavailable {
					t.Errorf("the next create: %v, want UNAVAILABLE", next.err)
				}
				d.waitAdmin(t) // the operator is told the file is sound but takes no writes
				paymentsd(t, "", "check", "--db", path).want(t, 1, "sound (through the running server), but the server holding it cannot commit", "restart")
				d.kill() // the file takes no more writes until a restart reads the disk
				retryAt = start(t, spec{db: path})
			} else if reason(a.err) == wire.ReasonOutcomeUnknown || status.Code(a.err) != codes.Unavailable {
				t.Fatalf("create: %v; want UNAVAILABLE saying it was not kept", a.err)
			}
			retry := retryAt.create(withCreds(hostileToken, key), req)
			if retry.err != nil {
				t.Fatalf("retry with the same key: %v, want the intent", retry.err)
			}
			if !tc.unknown && retry.replayed() {
				t.Error("the retry replayed a commit whose meta page was never written")
			}
			wantOneIntentPerAmount(t, retryAt)
		})
	}
}

// wantStatusReason fails t unless err has code and the interceptor's reason.
func wantStatusReason(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || reason(err) != want {
		t.Fatalf("%v; want %v with reason %s", err, code, want)
	}
}
