package main

// Storage faults with the real bbolt store: a full disk under the real
// binary, and a write that fails inside the real bbolt transaction in
// process. Each must leave nothing stored, so that the key runs afresh.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

const createMethod = paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName

// rpcLine is one "rpc" line of paymentsd's log.
type rpcLine struct {
	Msg, Method, Code, Idempotency, Err string
	Attempt                             uint64
}

// createLines returns the rpc lines of CreatePaymentIntent d has logged so
// far.
func createLines(d *daemon) []rpcLine {
	var lines []rpcLine
	sc := bufio.NewScanner(strings.NewReader(d.stderr()))
	for sc.Scan() {
		var l rpcLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "rpc" && l.Method == createMethod {
			lines = append(lines, l)
		}
	}
	return lines
}

// waitCreateLines waits until d has logged n CreatePaymentIntent lines: a
// line is written before its answer is sent, but reaches d.stderr() through
// a pipe.
func waitCreateLines(t *testing.T, d *daemon, n int) []rpcLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := createLines(d)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d CreatePaymentIntent log lines, want %d:\n%s", len(lines), n, d.stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func intentID(a answer) string {
	return a.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id
}

func ids(intents []*paymentsv1.PaymentIntent) []string {
	var s []string
	for _, pi := range intents {
		s = append(s, pi.Id)
	}
	slices.Sort(s)
	return s
}

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
	d := startDaemon(t, dbPath)
	const token = "disk-full-token"

	first := d.create(withCreds(token, "order-before-full"), seedRequest("1"))
	if first.err != nil {
		t.Fatalf("create before the disk is full: %v", first.err)
	}
	want := []string{intentID(first)} // every intent answered OK
	filler := fillUntilFull(t, dir)

	var failedKey string
	var failedBody *paymentsv1.CreatePaymentIntentRequest
	var failed answer
	for i := 1; failedKey == ""; i++ {
		if i > 50 {
			t.Fatalf("50 creates succeeded on a full tmpfs; want UNAVAILABLE once a commit needs a page the file lacks")
		}
		key, body := fmt.Sprintf("order-full-%d", i), seedRequest(strconv.Itoa(100+i))
		a := d.create(withCreds(token, key), body)
		switch {
		case a.err == nil:
			t.Logf("create %d on the full tmpfs succeeded: its commit rewrote pages the file already held", i)
			want = append(want, intentID(a))
		case status.Code(a.err) == codes.Unavailable:
			failedKey, failedBody, failed = key, body, a
		default:
			t.Fatalf("create %d on the full tmpfs: %v, want OK or UNAVAILABLE", i, a.err)
		}
	}

	// The caller learns that it may retry, not how the store failed.
	msg := status.Convert(failed.err).Message()
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

	// Still answering after the fault. (Whether it should say NOT_SERVING
	// is another question; this only checks that it answers.)
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check after the disk filled: %v; want an answer", err)
	} else {
		t.Logf("health after the disk filled: %v", h.Status)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	again := d.create(withCreds(token, failedKey), failedBody)
	if again.err != nil || again.replayed() {
		t.Fatalf("same key once space is back: %v (replayed %t); want a fresh run that succeeds", again.err, again.replayed())
	}
	if l := waitCreateLines(t, d, len(want)+2)[len(want)+1]; l.Idempotency != "fresh" || l.Attempt != 1 {
		t.Errorf("log of the rerun: %s attempt %d; want fresh attempt 1 (the failed claim released, not left in flight)", l.Idempotency, l.Attempt)
	}
	want = append(want, intentID(again))
	replay := d.create(withCreds(token, failedKey), failedBody)
	if replay.err != nil || !replay.replayed() || intentID(replay) != intentID(again) {
		t.Errorf("retry after the rerun: %v (replayed %t); want the rerun's intent %s replayed", replay.err, replay.replayed(), intentID(again))
	}

	// The failed attempt left no intent: exactly the ones answered OK.
	slices.Sort(want)
	if got := ids(d.list(t, token)); !slices.Equal(got, want) {
		t.Errorf("intents stored %v; want exactly those answered OK %v", got, want)
	}

	// The failed commit left the file sound.
	if err := d.stop(t); err != nil {
		t.Errorf("paymentsd exited with %v after SIGTERM; want 0:\n%s", err, d.stderr())
	}
	db, err := boltstore.Open(dbPath, nil)
	if err != nil {
		t.Fatalf("data file does not open after the disk filled: %v", err)
	}
	defer db.Close()
	if err := db.Check(); err != nil {
		t.Errorf("data file damaged after the disk filled: %v", err)
	}
}

// errInjected is the failure of the write staged by faultyIntents.
var errInjected = errors.New("injected")

// faultyIntents is the real boltintents store whose CreateIntent, while fail
// is set, also stages a write that fails, so that the real bbolt transaction
// completing the request fails after the intent's own write has run in it.
type faultyIntents struct {
	*boltintents.Store
	db   *boltstore.DB
	fail atomic.Bool

	mu    sync.Mutex
	calls []createCall
}

// createCall is one run of CreateIntent.
type createCall struct {
	amount, id string
	attempt    uint64
}

func (f *faultyIntents) CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error {
	attempt, _ := once.AttemptFrom(ctx)
	f.mu.Lock()
	f.calls = append(f.calls, createCall{pi.Amount, pi.Id, attempt})
	f.mu.Unlock()
	if err := f.Store.CreateIntent(ctx, owner, key, pi); err != nil {
		return err
	}
	if f.fail.Load() {
		return f.db.Update(ctx, func(*bolt.Tx) error { return errInjected })
	}
	return nil
}

// runs returns the runs of CreateIntent for a request of amount.
func (f *faultyIntents) runs(amount string) []createCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var r []createCall
	for _, c := range f.calls {
		if c.amount == amount {
			r = append(r, c)
		}
	}
	return r
}

// observations keeps what the interceptor reports of each finished call.
type observations struct {
	mu  sync.Mutex
	all []once.Observation
}

func (o *observations) Claimed(context.Context, once.Observation) {}
func (o *observations) Finished(_ context.Context, obs once.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, obs)
}

func (o *observations) last() once.Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all[len(o.all)-1]
}

// inProcess is paymentsd's stack served in process: the real bbolt store and
// intents, the auth and idempotency interceptors chained as main.go chains
// them, on a loopback port.
type inProcess struct {
	db      *boltstore.DB
	intents *faultyIntents
	obs     *observations
	d       *daemon // only its client: create and list work as for the binary
}

func startInProcess(t *testing.T, opts ...interceptor.Option) *inProcess {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := boltintents.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	p := &inProcess{db: db, intents: &faultyIntents{Store: store, db: db}, obs: &observations{}}
	opts = append([]interceptor.Option{
		interceptor.WithScope(auth.Scope),
		interceptor.WithKeyPolicy(createMethod, interceptor.KeyRequired),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, interceptor.KeyIgnored),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_ListPaymentIntents_FullMethodName, interceptor.KeyIgnored),
		interceptor.WithObserver(p.obs),
	}, opts...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		auth.UnaryServerInterceptor(auth.NewAuthenticator(auth.FromBearer, auth.Dev()), "/"+paymentsv1.PaymentIntentService_ServiceDesc.ServiceName+"/"),
		interceptor.MustUnaryServerInterceptor(db, opts...),
	))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, server.New(p.intents, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
		db.Close()
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.d = &daemon{client: paymentsv1.NewPaymentIntentServiceClient(conn)}
	return p
}

// createCounting creates and returns the answer and how many bbolt commits
// it took. Calls are sequential and nothing else writes, so the count is
// exact.
func (p *inProcess) createCounting(key string, body *paymentsv1.CreatePaymentIntentRequest) (answer, uint64) {
	before := p.db.Commits()
	a := p.d.create(withCreds("in-process-token", key), body)
	return a, p.db.Commits() - before
}

// createFailing creates with key while the intent's write fails, and checks
// the answer: UNAVAILABLE with a plain message, the cause observed for the
// log.
func (p *inProcess) createFailing(t *testing.T, key string, body *paymentsv1.CreatePaymentIntentRequest) {
	t.Helper()
	p.intents.fail.Store(true)
	failed := p.d.create(withCreds("in-process-token", key), body)
	p.intents.fail.Store(false)
	if status.Code(failed.err) != codes.Unavailable {
		t.Fatalf("create whose write fails: %v; want UNAVAILABLE", failed.err)
	}
	if msg := status.Convert(failed.err).Message(); strings.Contains(msg, errInjected.Error()) {
		t.Errorf("UNAVAILABLE message %q carries the store's error; want a plain message", msg)
	}
	if obs := p.obs.last(); !errors.Is(obs.Err, errInjected) {
		t.Errorf("observed error %v; want the injected cause, for the log", obs.Err)
	}
}

func (p *inProcess) getCode(t *testing.T, id string) codes.Code {
	t.Helper()
	_, err := p.d.client.GetPaymentIntent(withCreds("in-process-token", ""), &paymentsv1.GetPaymentIntentRequest{Id: id})
	return status.Code(err)
}

// TestInProcess_TransactionalCreate_FailedWriteStoresNothingKeyRunsFresh: a
// staged write that fails inside the real bbolt transaction fails the whole
// unit of work: no intent, no record, so the same key runs fresh.
func TestInProcess_TransactionalCreate_FailedWriteStoresNothingKeyRunsFresh(t *testing.T) {
	p := startInProcess(t, interceptor.WithTransactional(createMethod))

	ok, commits := p.createCounting("order-ok", seedRequest("1"))
	if ok.err != nil {
		t.Fatal(ok.err)
	}
	if commits != 1 {
		t.Errorf("a transactional create took %d bbolt commits; want 1 (claim, intent and result together)", commits)
	}

	body := seedRequest("2")
	p.createFailing(t, "order-fail", body)
	runs := p.intents.runs("2")
	if len(runs) != 1 {
		t.Fatalf("CreateIntent ran %d times for the failed create; want 1", len(runs))
	}
	if code := p.getCode(t, runs[0].id); code != codes.NotFound {
		t.Errorf("the failed attempt's intent %s: %v; want NOT_FOUND", runs[0].id, code)
	}
	if got, want := ids(p.d.list(t, "in-process-token")), []string{intentID(ok)}; !slices.Equal(got, want) {
		t.Errorf("intents after the failure %v; want only %v", got, want)
	}

	// No record was kept: the same key runs fresh, as attempt 1 again.
	again, commits := p.createCounting("order-fail", body)
	if again.err != nil || again.replayed() {
		t.Fatalf("same key after the failure: %v (replayed %t); want a fresh run that succeeds", again.err, again.replayed())
	}
	if commits != 1 {
		t.Errorf("the rerun took %d bbolt commits; want 1", commits)
	}
	if runs := p.intents.runs("2"); len(runs) != 2 || runs[1].attempt != 1 {
		t.Errorf("CreateIntent runs for the key %+v; want 2, the second as attempt 1", runs)
	}
	replay := p.d.create(withCreds("in-process-token", "order-fail"), body)
	if replay.err != nil || !replay.replayed() || intentID(replay) != intentID(again) {
		t.Errorf("retry after the rerun: %v (replayed %t); want intent %s replayed", replay.err, replay.replayed(), intentID(again))
	}
	if n := len(p.intents.runs("2")); n != 2 {
		t.Errorf("CreateIntent ran %d times for the key after the replay; want 2", n)
	}
	want := []string{intentID(ok), intentID(again)}
	slices.Sort(want)
	if got := ids(p.d.list(t, "in-process-token")); !slices.Equal(got, want) {
		t.Errorf("intents %v; want %v", got, want)
	}
}

// TestInProcess_DurableClaim_FailedWriteKeepsKeyInFlightUntilTakeover: for a
// method that is not transactional, the claim is committed before the
// handler runs. A failed completion leaves it in flight, so a retry is
// refused until the lease ends, then takes over as attempt 2; the failed
// attempt's intent was never stored.
func TestInProcess_DurableClaim_FailedWriteKeepsKeyInFlightUntilTakeover(t *testing.T) {
	// The clock moves the lease; renewals tick every lease/3 of real time,
	// so an hour's lease keeps them out of the commit counts.
	const lease = time.Hour
	clock := testclock.New()
	p := startInProcess(t, interceptor.WithClock(clock.Now), interceptor.WithLease(lease))

	ok, commits := p.createCounting("order-ok", seedRequest("1"))
	if ok.err != nil {
		t.Fatal(ok.err)
	}
	if commits != 2 {
		t.Errorf("a create with a durable claim took %d bbolt commits; want 2 (the claim, then intent and result)", commits)
	}

	body := seedRequest("2")
	p.createFailing(t, "order-fail", body)

	// The durable claim survived the failed completion.
	busy := p.d.create(withCreds("in-process-token", "order-fail"), body)
	if status.Code(busy.err) != codes.Aborted || reason(busy.err) != wire.ReasonKeyInUse {
		t.Errorf("immediate retry: %v; want ABORTED / %s", busy.err, wire.ReasonKeyInUse)
	}
	if n := len(p.intents.runs("2")); n != 1 {
		t.Errorf("CreateIntent ran %d times before the lease ended; want 1", n)
	}

	clock.Advance(lease + time.Second)
	again, commits := p.createCounting("order-fail", body)
	if again.err != nil || again.replayed() {
		t.Fatalf("retry after the lease: %v (replayed %t); want a takeover that succeeds", again.err, again.replayed())
	}
	if obs := p.obs.last(); obs.Outcome != storage.OutcomeTakeover || obs.Attempt != 2 {
		t.Errorf("retry after the lease: %v attempt %d; want takeover attempt 2", obs.Outcome, obs.Attempt)
	}
	if commits != 2 {
		t.Errorf("the takeover took %d bbolt commits; want 2", commits)
	}
	runs := p.intents.runs("2")
	if len(runs) != 2 || runs[0].attempt != 1 || runs[1].attempt != 2 {
		t.Fatalf("CreateIntent runs for the key %+v; want attempts 1 and 2", runs)
	}
	if code := p.getCode(t, runs[0].id); code != codes.NotFound {
		t.Errorf("attempt 1's intent %s: %v; want NOT_FOUND", runs[0].id, code)
	}
	replay := p.d.create(withCreds("in-process-token", "order-fail"), body)
	if replay.err != nil || !replay.replayed() || intentID(replay) != intentID(again) {
		t.Errorf("retry after the takeover: %v (replayed %t); want intent %s replayed", replay.err, replay.replayed(), intentID(again))
	}
	want := []string{intentID(ok), intentID(again)}
	slices.Sort(want)
	if got := ids(p.d.list(t, "in-process-token")); !slices.Equal(got, want) {
		t.Errorf("intents %v; want %v", got, want)
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
			d := startDaemon(t, path, "--sweep-interval", "1h")
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
				if next := d.create(withCreds(hostileToken, "after-"+key), seedRequest("1")); status.Code(next.err) != codes.Unavailable {
					t.Errorf("the next create: %v, want UNAVAILABLE", next.err)
				}
				waitAdmin(t, d) // the operator is told the file is sound but takes no writes
				paymentsd(t, "", "check", "--db", path).want(t, 1, "sound (through the running server), but the server holding it cannot commit", "restart")
				d.cmd.Process.Kill() // the file takes no more writes until a restart reads the disk
				<-d.exited
				retryAt = startDaemon(t, path)
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
