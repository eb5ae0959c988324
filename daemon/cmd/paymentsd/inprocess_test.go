package main

// A write that fails inside the real bbolt transaction, in process:
// paymentsd's stack served on a loopback port with the real store and
// intents, and a store that fails the completion of a create. Each must
// leave nothing stored, so that the key runs afresh.

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
