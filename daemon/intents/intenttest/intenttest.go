// Package intenttest is the conformance suite every server.IntentStore must
// pass. It tests the store together with the storage.TxStore whose units
// of work its writes join. A backend's test calls RunTests with a function
// that opens both on one database:
//
//	func TestConformance(t *testing.T) {
//		intenttest.RunTests(t, func(t *testing.T, dir string) intenttest.Backend {
//			db, err := mystore.Open(dir)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return intenttest.Backend{Intents: db.Intents(), Records: db, Close: db.Close}
//		})
//	}
package intenttest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/storage"
)

// Backend is what the suite tests. It holds the intents and the
// idempotency records kept in one database.
type Backend struct {
	// Intents is the store under test.
	Intents server.IntentStore
	// Records is the idempotency store on the same database. A write of
	// Intents made with the context of one of its Tx joins that Tx.
	Records storage.TxStore
	// Close releases both.
	Close func() error
}

// Opener opens the backend kept in dir, a directory of its own for each
// test. The suite closes every backend it opens.
type Opener func(t *testing.T, dir string) Backend

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// RunTests runs the conformance suite against the backends open returns.
func RunTests(t *testing.T, open Opener) {
	tests := []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"OtherOwner_GetsNotFoundAndListsNothing", testOwnerIsolation},
		{"Create_TakenID_IsErrExistsAndKeepsIntent", testExists},
		{"List_PagesInCreationOrder", testPaging},
		{"List_CursorNamingNoIntent_ListsFromWhereItWouldSort", testCursorNamingNoIntent},
		{"List_LimitBelowOne_IsError", testBadLimit},
		{"Update_Concurrent_EachAppliedOnce", testUpdateConcurrent},
		{"Update_NoChange_StoresNothing", testUpdateNoChange},
		{"Server_ExpiredIntent_ReadsAsCanceled", testExpiredReadsCanceled},
		{"Tx_StagedCreate_VisibleOnlyAfterCommit", testStagedVisibleAfterCommit},
		{"Tx_FailedWrite_RollsBackWritesAndRecord", testFailedWriteRollsBack},
		{"Tx_CommitAfterTakeover_IsSupersededAndDropsWrites_ExclusiveNeverTakesOverALiveTx", testTakeoverDropsWrites},
		{"Tx_Rollback_DropsStagedWrites", testRollbackDropsWrites},
		{"Once_Transactional_IntentCommitsWithItsRecordOrNotAtAll", testOnceTransactional},
		{"Find_CreatedUnderAKey_KeepsTheKey", testFindKeepsKey},
		{"Scan_NewestFirst_FromATimeBeforeAPosition", testScan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

func newBackend(t *testing.T, open Opener) Backend {
	t.Helper()
	b := open(t, t.TempDir())
	t.Cleanup(func() { b.Close() })
	return b
}

// intent is a new intent created at created, expiring 15 minutes later.
func intent(id string, created time.Time) *paymentsv1.PaymentIntent {
	return &paymentsv1.PaymentIntent{
		Id:         id,
		State:      paymentsv1.State_STATE_CREATED,
		Version:    1,
		Chain:      "evm:31337",
		Token:      "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:      "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:   "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:     "100000000",
		CreateTime: timestamppb.New(created),
		ExpireTime: timestamppb.New(created.Add(15 * time.Minute)),
	}
}

func create(t *testing.T, b Backend, owner string, pi *paymentsv1.PaymentIntent) {
	t.Helper()
	if err := b.Intents.CreateIntent(context.Background(), owner, "", pi); err != nil {
		t.Fatalf("CreateIntent(%s, %s): %v", owner, pi.Id, err)
	}
}

// stored checks that owner's intent id is stored as want.
func stored(t *testing.T, b Backend, owner string, want *paymentsv1.PaymentIntent) {
	t.Helper()
	got, err := b.Intents.GetIntent(context.Background(), owner, want.Id)
	if err != nil {
		t.Fatalf("GetIntent(%s, %s): %v, want the intent", owner, want.Id, err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("GetIntent(%s, %s) = %v, want %v", owner, want.Id, got, want)
	}
}

// absent checks that owner has no intent id.
func absent(t *testing.T, b Backend, owner, id string) {
	t.Helper()
	got, err := b.Intents.GetIntent(context.Background(), owner, id)
	if !errors.Is(err, server.ErrNotFound) {
		t.Errorf("GetIntent(%s, %s) = %v, %v; want ErrNotFound", owner, id, got, err)
	}
}

// list returns every intent of owner, in pages of 100.
func list(t *testing.T, b Backend, owner string) []string {
	t.Helper()
	var ids []string
	var after []byte
	for range 1000 {
		page, next, err := b.Intents.ListIntents(context.Background(), owner, after, 100)
		if err != nil {
			t.Fatalf("ListIntents(%s): %v", owner, err)
		}
		for _, pi := range page {
			ids = append(ids, pi.Id)
		}
		if next == nil {
			return ids
		}
		after = next
	}
	t.Fatalf("ListIntents(%s) never reached its last page", owner)
	return nil
}

func ids(page []*paymentsv1.PaymentIntent) []string {
	out := make([]string, len(page))
	for i, pi := range page {
		out[i] = pi.Id
	}
	return out
}

func request(key string, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{
		Key:         storage.RecordKey{Scope: "alice", Key: key}, // the owner, as in paymentsd
		Fingerprint: sha256.Sum256([]byte("body")),
		Scheme:      storage.FingerprintScheme,
		Now:         now, Lease: lease, TTL: ttl,
	}
}

func claim(t *testing.T, b Backend, req storage.ClaimRequest, want storage.Outcome) *storage.Record {
	t.Helper()
	got, rec, err := b.Records.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%q at %v): %v", req.Key.Key, req.Now, err)
	}
	if got != want {
		t.Fatalf("Claim(%q at %v) = %v, want %v", req.Key.Key, req.Now, got, want)
	}
	return rec
}

// durability is the Durability of a claim durable or not: subtests keep
// their names of a bool.
func durability(durable bool) storage.Durability {
	if durable {
		return storage.Durable
	}
	return storage.Transactional
}

// claimTx claims a new key through ClaimTx. The Tx is rolled back when the
// test ends, unless it ended before.
func claimTx(t *testing.T, b Backend, req storage.ClaimRequest, durable storage.Durability) (*storage.Record, storage.Tx) {
	t.Helper()
	got, rec, tx, err := b.Records.ClaimTx(context.Background(), req, durable)
	if tx != nil {
		t.Cleanup(tx.Rollback)
	}
	if err != nil || got != storage.OutcomeFresh || tx == nil {
		t.Fatalf("ClaimTx(%q, durability %v) = %v, Tx %v, %v; want fresh with a Tx", req.Key.Key, durable, got, tx, err)
	}
	return rec, tx
}

func result(t *testing.T, text string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}

func testOwnerIsolation(t *testing.T, open Opener) {
	b := newBackend(t, open)
	mine := intent("pi_alice", t0)
	create(t, b, "alice", mine)
	create(t, b, "bob", intent("pi_bob", t0.Add(time.Second)))
	// Owners whose names would run into each other if simply concatenated.
	create(t, b, "alicebob", intent("pi_alicebob", t0.Add(2*time.Second)))

	absent(t, b, "bob", mine.Id)
	absent(t, b, "alice", "pi_missing")
	called := false
	got, err := b.Intents.UpdateIntent(context.Background(), "bob", mine.Id, func(pi *paymentsv1.PaymentIntent) bool {
		called = true
		pi.Amount = "1"
		return true
	})
	if !errors.Is(err, server.ErrNotFound) {
		t.Errorf("UpdateIntent(bob, %s) = %v, %v; want ErrNotFound", mine.Id, got, err)
	}
	if called {
		t.Errorf("UpdateIntent(bob, %s) showed bob alice's intent; want update never called", mine.Id)
	}
	stored(t, b, "alice", mine)

	for owner, want := range map[string][]string{
		"alice":    {"pi_alice"},
		"bob":      {"pi_bob"},
		"alicebob": {"pi_alicebob"},
		"carol":    nil,
	} {
		if got := list(t, b, owner); !slices.Equal(got, want) {
			t.Errorf("ListIntents(%s) = %v, want %v", owner, got, want)
		}
	}
}

func testExists(t *testing.T, open Opener) {
	b := newBackend(t, open)
	orig := intent("pi_taken", t0)
	create(t, b, "alice", orig)

	again := intent("pi_taken", t0.Add(time.Hour))
	again.Amount = "999"
	if err := b.Intents.CreateIntent(context.Background(), "alice", "", again); !errors.Is(err, server.ErrExists) {
		t.Errorf("CreateIntent(alice, taken id) = %v, want ErrExists", err)
	}
	stored(t, b, "alice", orig)
	if got, want := list(t, b, "alice"), []string{"pi_taken"}; !slices.Equal(got, want) {
		t.Errorf("ListIntents(alice) = %v, want %v", got, want)
	}

	// Whether ids are shared by all owners or not, another owner's create
	// leaves alice's intent as it was.
	err := b.Intents.CreateIntent(context.Background(), "bob", "", again)
	if err != nil && !errors.Is(err, server.ErrExists) {
		t.Errorf("CreateIntent(bob, alice's id) = %v, want nil or ErrExists", err)
	}
	stored(t, b, "alice", orig)
	if got, want := list(t, b, "alice"), []string{"pi_taken"}; !slices.Equal(got, want) {
		t.Errorf("ListIntents(alice) after bob's create = %v, want %v", got, want)
	}
}

// createScrambled creates n intents of owner, created at t0 + 2s·j for
// j < n. It creates them in an order that is neither creation order nor id
// order. Their ids sort opposite to creation. It returns their ids in
// creation order.
func createScrambled(t *testing.T, b Backend, owner string, n int) []string {
	t.Helper()
	order := make([]string, n)
	for i := range n {
		j := (i * 7) % n // 7 is coprime with the sizes used here: a permutation
		id := fmt.Sprintf("pi_%s_%02d", owner, n-1-j)
		create(t, b, owner, intent(id, t0.Add(time.Duration(2*j)*time.Second)))
		order[j] = id
	}
	return order
}

func testPaging(t *testing.T, open Opener) {
	b := newBackend(t, open)
	want := createScrambled(t, b, "alice", 25)
	createScrambled(t, b, "bob", 12) // interleaved in time, never listed for alice

	var after []byte
	for i, size := range []int{10, 10, 5} {
		page, next, err := b.Intents.ListIntents(context.Background(), "alice", after, 10)
		if err != nil {
			t.Fatalf("page %d: %v", i+1, err)
		}
		if got, want := ids(page), want[:size]; !slices.Equal(got, want) {
			t.Errorf("page %d = %v, want %v", i+1, got, want)
		}
		want = want[min(size, len(want)):]
		if last := i == 2; (next == nil) != last {
			t.Errorf("page %d: next cursor %x, want nil %t", i+1, next, last)
		}
		if next == nil {
			break
		}
		after = next
	}
}

func testCursorNamingNoIntent(t *testing.T, open Opener) {
	// A cursor is opaque to the suite. So a cursor naming no intent of this
	// backend is made by listing another backend of the same kind. That
	// backend holds intents this one does not.
	b := newBackend(t, open)
	all := createScrambled(t, b, "alice", 25) // created at t0 + 2s·j

	other := newBackend(t, open)
	at := func(j int) time.Time { return t0.Add(time.Duration(2*j) * time.Second) }
	for j := range 10 {
		create(t, other, "alice", intent(all[j], at(j)))
	}
	create(t, other, "alice", intent("pi_ghost_middle", at(9).Add(-time.Second))) // between j 8 and 9
	create(t, other, "alice", intent("pi_ghost_end", at(24).Add(time.Second)))    // after every intent of b
	create(t, other, "alice", intent("pi_ghost_last", at(24).Add(2*time.Second)))

	page, middle, err := other.Intents.ListIntents(context.Background(), "alice", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(page), append(slices.Clone(all[:9]), "pi_ghost_middle"); !slices.Equal(got, want) || middle == nil {
		t.Fatalf("other backend's first page = %v, next %x; want %v and a next cursor", got, middle, want)
	}
	page, end, err := other.Intents.ListIntents(context.Background(), "alice", middle, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(page), []string{all[9], "pi_ghost_end"}; !slices.Equal(got, want) || end == nil {
		t.Fatalf("other backend's second page = %v, next %x; want %v and a next cursor", got, end, want)
	}

	page, next, err := b.Intents.ListIntents(context.Background(), "alice", middle, 10)
	if err != nil {
		t.Fatalf("ListIntents(after a cursor naming no intent): %v", err)
	}
	if got, want := ids(page), all[9:19]; !slices.Equal(got, want) || next == nil {
		t.Errorf("ListIntents(after a cursor between the 9th and 10th intents) = %v, next %x; want %v and a next cursor", got, next, want)
	}
	page, next, err = b.Intents.ListIntents(context.Background(), "alice", end, 10)
	if err != nil {
		t.Fatalf("ListIntents(after a cursor past the last intent): %v", err)
	}
	if len(page) != 0 || next != nil {
		t.Errorf("ListIntents(after a cursor past the last intent) = %v, next %x; want nothing, nil", ids(page), next)
	}
}

func testBadLimit(t *testing.T, open Opener) {
	b := newBackend(t, open)
	createScrambled(t, b, "alice", 3)
	for _, limit := range []int{0, -1} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("ListIntents(limit %d) panicked: %v; want an error", limit, p)
				}
			}()
			page, next, err := b.Intents.ListIntents(context.Background(), "alice", nil, limit)
			if err == nil {
				t.Errorf("ListIntents(limit %d) = %v, next %x, nil; want an error", limit, ids(page), next)
			}
		}()
	}
}

func testUpdateConcurrent(t *testing.T, open Opener) {
	b := newBackend(t, open)
	pi := intent("pi_counter", t0)
	create(t, b, "alice", pi)
	const n = 20
	versions := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			got, err := b.Intents.UpdateIntent(context.Background(), "alice", pi.Id, func(pi *paymentsv1.PaymentIntent) bool {
				pi.Version++
				return true
			})
			if err != nil {
				t.Error(err)
				return
			}
			versions <- got.Version
		})
	}
	wg.Wait()
	close(versions)
	// Each update saw the one before it. Every version from 2 to n+1 was
	// returned exactly once.
	var got []int64
	for v := range versions {
		got = append(got, v)
	}
	slices.Sort(got)
	want := make([]int64, n)
	for i := range want {
		want[i] = pi.Version + int64(i) + 1
	}
	if !slices.Equal(got, want) {
		t.Errorf("versions returned by %d concurrent updates = %v, want %v", n, got, want)
	}
	final, err := b.Intents.GetIntent(context.Background(), "alice", pi.Id)
	if err != nil {
		t.Fatal(err)
	}
	if final.Version != pi.Version+n {
		t.Errorf("version after %d concurrent increments = %d, want %d", n, final.Version, pi.Version+n)
	}
}

func testUpdateNoChange(t *testing.T, open Opener) {
	b := newBackend(t, open)
	pi := intent("pi_same", t0)
	create(t, b, "alice", pi)
	// update edits its copy but reports no change: nothing is stored.
	if _, err := b.Intents.UpdateIntent(context.Background(), "alice", pi.Id, func(pi *paymentsv1.PaymentIntent) bool {
		pi.Amount = "1"
		pi.Version = 99
		return false
	}); err != nil {
		t.Fatalf("UpdateIntent(no change): %v", err)
	}
	stored(t, b, "alice", pi)

	// A change is stored, and returned as stored.
	got, err := b.Intents.UpdateIntent(context.Background(), "alice", pi.Id, func(pi *paymentsv1.PaymentIntent) bool {
		pi.Amount = "2"
		pi.Version++
		return true
	})
	if err != nil {
		t.Fatalf("UpdateIntent(change): %v", err)
	}
	want := proto.CloneOf(pi)
	want.Amount, want.Version = "2", 2
	if !proto.Equal(got, want) {
		t.Errorf("UpdateIntent(change) = %v, want %v", got, want)
	}
	stored(t, b, "alice", want)

	if got, err := b.Intents.UpdateIntent(context.Background(), "alice", "pi_missing", func(*paymentsv1.PaymentIntent) bool { return true }); !errors.Is(err, server.ErrNotFound) {
		t.Errorf("UpdateIntent(missing id) = %v, %v; want ErrNotFound", got, err)
	}
}

func testExpiredReadsCanceled(t *testing.T, open Opener) {
	b := newBackend(t, open)
	clock := testclock.New()
	srv := server.New(b.Intents, clock.Now)
	ctx := auth.NewContext(context.Background(), "alice")
	resp, err := srv.CreatePaymentIntent(ctx, createRequest())
	if err != nil {
		t.Fatal(err)
	}
	created := resp.PaymentIntent
	expire := created.ExpireTime.AsTime()

	read := func() (get, listed *paymentsv1.PaymentIntent) {
		t.Helper()
		g, err := srv.GetPaymentIntent(ctx, &paymentsv1.GetPaymentIntentRequest{Id: created.Id})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		l, err := srv.ListPaymentIntents(ctx, &paymentsv1.ListPaymentIntentsRequest{PageSize: 10})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(l.PaymentIntents) != 1 {
			t.Fatalf("List = %v, want the one intent", l.PaymentIntents)
		}
		return g.PaymentIntent, l.PaymentIntents[0]
	}

	clock.Advance(expire.Sub(clock.Now()) - time.Nanosecond)
	g, l := read()
	for name, pi := range map[string]*paymentsv1.PaymentIntent{"Get": g, "List": l} {
		if !proto.Equal(pi, created) {
			t.Errorf("%s a nanosecond before expire_time = %v, want it as created: %v", name, pi, created)
		}
	}

	clock.Advance(time.Nanosecond)
	g, l = read()
	for name, pi := range map[string]*paymentsv1.PaymentIntent{"Get": g, "List": l} {
		if pi.State != paymentsv1.State_STATE_CANCELED ||
			pi.CancellationReason != paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED ||
			pi.CancelTime == nil || !pi.CancelTime.AsTime().Equal(expire) {
			t.Errorf("%s at expire_time = state %v reason %v cancel_time %v; want %v, %v, %v", name,
				pi.State, pi.CancellationReason, pi.CancelTime.AsTime(),
				paymentsv1.State_STATE_CANCELED, paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED, expire)
		}
		if pi.Id != created.Id || pi.Amount != created.Amount || !proto.Equal(pi.CreateTime, created.CreateTime) || !proto.Equal(pi.ExpireTime, created.ExpireTime) {
			t.Errorf("%s at expire_time = %v, want the created intent's id, amount and times: %v", name, pi, created)
		}
	}
}

func testStagedVisibleAfterCommit(t *testing.T, open Opener) {
	for _, keepWrites := range []bool{true, false} {
		t.Run(fmt.Sprintf("keepWrites=%t", keepWrites), func(t *testing.T) {
			b := newBackend(t, open)
			req := request("k", t0)
			rec, tx := claimTx(t, b, req, storage.Transactional)
			pi := intent("pi_staged", t0)
			if err := b.Intents.CreateIntent(tx.Context(context.Background()), "alice", "", pi); err != nil {
				t.Fatalf("CreateIntent in a Tx: %v", err)
			}
			absent(t, b, "alice", pi.Id)
			if got := list(t, b, "alice"); len(got) != 0 {
				t.Errorf("ListIntents before Commit = %v, want nothing", got)
			}

			// A Tx keeps the writes of a response, and drops those of an error.
			done := result(t, "done")
			if !keepWrites {
				done = &storage.Result{Status: &spb.Status{Code: int32(codes.FailedPrecondition), Message: "refused"}}
			}
			if err := tx.Commit(context.Background(), rec.Completed(done)); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if keepWrites {
				stored(t, b, "alice", pi)
				if got, want := list(t, b, "alice"), []string{pi.Id}; !slices.Equal(got, want) {
					t.Errorf("ListIntents after Commit = %v, want %v", got, want)
				}
			} else {
				absent(t, b, "alice", pi.Id)
				if got := list(t, b, "alice"); len(got) != 0 {
					t.Errorf("ListIntents after Commit without writes = %v, want nothing", got)
				}
			}
			got := claim(t, b, request("k", t0.Add(time.Hour)), storage.OutcomeReplay)
			if got.State != storage.StateCompleted || got.Result == nil || !proto.Equal(got.Result.Response, done.Response) || !proto.Equal(got.Result.Status, done.Status) {
				t.Errorf("record after Commit: state %v result %v, want completed with the committed result", got.State, got.Result)
			}
		})
	}
}

func testFailedWriteRollsBack(t *testing.T, open Opener) {
	for _, takenFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("takenFirst=%t", takenFirst), func(t *testing.T) {
			b := newBackend(t, open)
			taken := intent("pi_taken", t0)
			create(t, b, "alice", taken)

			req := request("k", t0)
			rec, tx := claimTx(t, b, req, storage.Transactional)
			ctx := tx.Context(context.Background())
			dup := intent("pi_taken", t0.Add(time.Minute))
			dup.Amount = "999"
			fresh := intent("pi_new", t0.Add(time.Minute))
			createDup := func() {
				// ErrExists now or when the Tx commits: both are allowed.
				if err := b.Intents.CreateIntent(ctx, "alice", "", dup); err != nil && !errors.Is(err, server.ErrExists) {
					t.Errorf("CreateIntent(taken id) in a Tx = %v, want nil or ErrExists", err)
				}
			}
			createFresh := func() {
				if err := b.Intents.CreateIntent(ctx, "alice", "", fresh); err != nil {
					t.Logf("CreateIntent(new id) in a Tx that already failed: %v", err)
				}
			}
			if takenFirst {
				createDup()
				createFresh()
			} else {
				createFresh()
				createDup()
			}

			if err := tx.Commit(context.Background(), rec.Completed(result(t, "done"))); err == nil {
				t.Fatal("Commit of a Tx with a create of a taken id = nil, want an error")
			}
			absent(t, b, "alice", fresh.Id)
			stored(t, b, "alice", taken)
			if got, want := list(t, b, "alice"), []string{taken.Id}; !slices.Equal(got, want) {
				t.Errorf("ListIntents after the failed Commit = %v, want %v", got, want)
			}
			// Neither is the record: the key runs afresh.
			if got := claim(t, b, req, storage.OutcomeFresh); got.Attempt != 1 {
				t.Errorf("claim after the failed Commit: attempt %d, want 1", got.Attempt)
			}
		})
	}
}

func testTakeoverDropsWrites(t *testing.T, open Opener) {
	b := newBackend(t, open)
	req := request("k", t0)
	first, tx := claimTx(t, b, req, storage.Durable)
	pi := intent("pi_stale", t0)
	if err := b.Intents.CreateIntent(tx.Context(context.Background()), "alice", "", pi); err != nil {
		t.Fatalf("CreateIntent in a Tx: %v", err)
	}
	if c, ok := b.Records.(interface{ Claimant() storage.Claimant }); ok && c.Claimant().Exclusive {
		// An exclusive store never takes over a Tx this process still runs.
		// Its writes commit with its result, however late.
		claim(t, b, request("k", t0.Add(time.Hour)), storage.OutcomeInFlight)
		if err := tx.Commit(context.Background(), first.Completed(result(t, "live"))); err != nil {
			t.Fatalf("Commit(live attempt past its lease) = %v, want it stored", err)
		}
		if got := list(t, b, "alice"); len(got) != 1 || got[0] != pi.Id {
			t.Errorf("ListIntents after the live Commit = %v, want %s", got, pi.Id)
		}
		return
	}
	second := claim(t, b, request("k", t0.Add(lease)), storage.OutcomeTakeover)

	if err := tx.Commit(context.Background(), first.Completed(result(t, "stale"))); !errors.Is(err, storage.ErrSuperseded) {
		t.Fatalf("Commit(attempt 1 after takeover) = %v, want ErrSuperseded", err)
	}
	absent(t, b, "alice", pi.Id)
	if got := list(t, b, "alice"); len(got) != 0 {
		t.Errorf("ListIntents after the superseded Commit = %v, want nothing", got)
	}
	rec := claim(t, b, request("k", t0.Add(lease+time.Second)), storage.OutcomeInFlight)
	if rec.Attempt != 2 || rec.Token != second.Token {
		t.Errorf("after the superseded Commit: attempt %d same token %t, want attempt 2 in flight", rec.Attempt, rec.Token == second.Token)
	}
}

func testRollbackDropsWrites(t *testing.T, open Opener) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%t", durable), func(t *testing.T) {
			b := newBackend(t, open)
			req := request("k", t0)
			_, tx := claimTx(t, b, req, durability(durable))
			ctx := tx.Context(context.Background())
			pi := intent("pi_rolled_back", t0)
			if err := b.Intents.CreateIntent(ctx, "alice", "", pi); err != nil {
				t.Fatalf("CreateIntent in a Tx: %v", err)
			}
			tx.Rollback()
			absent(t, b, "alice", pi.Id)

			// A write through the ended Tx joins nothing and says so.
			late := intent("pi_late", t0)
			if err := b.Intents.CreateIntent(ctx, "alice", "", late); err == nil {
				t.Errorf("CreateIntent through a rolled-back Tx = nil, want an error")
			}
			absent(t, b, "alice", late.Id)
			if got := list(t, b, "alice"); len(got) != 0 {
				t.Errorf("ListIntents after Rollback = %v, want nothing", got)
			}

			if durable {
				claim(t, b, request("k", t0.Add(time.Second)), storage.OutcomeInFlight)
			} else if got := claim(t, b, req, storage.OutcomeFresh); got.Attempt != 1 {
				t.Errorf("claim after Rollback: attempt %d, want 1", got.Attempt)
			}
		})
	}
}

// createRequest is a valid create, of an intent expiring in 15 minutes.
func createRequest() *paymentsv1.CreatePaymentIntentRequest {
	return &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           "100000000",
		ExpiresInSeconds: 900,
	}
}
