package pods_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/pods"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// replica is a router of a test, with the rules over it.
type replica struct {
	*pods.Router
	g   *once.Guard
	dir string
	w   world
}

func (w world) replica(t *testing.T, dir string) replica {
	t.Helper()
	r := w.open(t, dir)
	t.Cleanup(func() { r.Close() })
	g, err := once.New(r.Records(), once.Options{Lease: 30 * time.Second, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return replica{Router: r, g: g, dir: dir, w: w}
}

// create creates an intent of principal's under key, as paymentsd does:
// the intent written in the claim's transaction.
func (r replica) create(principal, key string) (*paymentsv1.PaymentIntent, error) {
	pi := &paymentsv1.PaymentIntent{Id: "pi_" + principal + "_" + key, State: paymentsv1.State_STATE_CREATED, Version: 1,
		Amount: "100", CreateTime: timestamppb.New(t0), ExpireTime: timestamppb.New(t0.Add(time.Hour))}
	req := once.Request{Scope: principal, Key: key, Operation: "/test/Create", Message: pi, Transactional: true}
	resp, _, err := once.Do(context.Background(), r.g, req, func(ctx context.Context) (*paymentsv1.PaymentIntent, error) {
		return pi, r.Intents().CreateIntent(ctx, principal, key, pi)
	})
	return resp, err
}

// rows returns the principals that pod's database holds records and
// intents of.
func (r replica) rows(t *testing.T, pod string) (records, intents map[string]int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.w.clusters[pod].URL(pgtest.DatabaseName(r.dir+"/"+pod)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(sql string) map[string]int {
		out := map[string]int{}
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var who string
			var n int
			if err := rows.Scan(&who, &n); err != nil {
				t.Fatal(err)
			}
			out[who] = n
		}
		return out
	}
	return count(`SELECT scope, count(*) FROM idempotency_records GROUP BY scope`),
		count(`SELECT owner, count(*) FROM payment_intents GROUP BY owner`)
}

// TestRouter_PrincipalsSpread_EachWhollyInItsPod: twenty principals
// create; each one's records and intents are all in the pod the
// directory names, none in the other, and both pods hold some.
func TestRouter_PrincipalsSpread_EachWhollyInItsPod(t *testing.T) {
	r := newWorld(t).replica(t, t.TempDir())
	for i := range 20 {
		for _, key := range []string{"k1", "k2", "k1"} {
			if _, err := r.create(fmt.Sprintf("merchant-%d", i), key); err != nil {
				t.Fatalf("create: %v", err)
			}
		}
	}
	held := map[string]int{}
	for _, pod := range []string{"a", "b"} {
		recs, ints := r.rows(t, pod)
		for principal, n := range recs {
			pl, ok := r.dirLookup(principal)
			if !ok || pl != pod || n != 2 || ints[principal] != 2 {
				t.Errorf("pod %s holds %d records and %d intents of %s, placed on %q: want 2 and 2, on this pod", pod, n, ints[principal], principal, pl)
			}
		}
		held[pod] = len(recs)
	}
	if held["a"]+held["b"] != 20 || held["a"] == 0 || held["b"] == 0 {
		t.Errorf("principals per pod: %v; want 20 in all, spread over both", held)
	}
}

// dirLookup is the pod the directory places principal on.
func (r replica) dirLookup(principal string) (string, bool) {
	pl, ok, err := r.Directory().Resolve(context.Background(), principal)
	if err != nil {
		return "", false
	}
	return pl.Pod, ok
}

// TestRouter_TxKeepsItsPod_WhenThePlacementChanges: a create's intent
// goes to the database of its claim, even when the directory has moved
// the principal meanwhile.
func TestRouter_TxKeepsItsPod_WhenThePlacementChanges(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, t.TempDir())
	req := storage.ClaimRequest{Key: storage.RecordKey{Scope: "acme", Key: "k"}, Scheme: "test", Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
	_, rec, tx, err := r.Records().ClaimTx(context.Background(), req, storage.Transactional)
	if err != nil || tx == nil {
		t.Fatalf("ClaimTx: %v", err)
	}
	defer tx.Rollback()
	from, _ := r.dirLookup("acme")
	to := map[string]string{"a": "b", "b": "a"}[from]
	r.setPlacement(t, "acme", to)
	pi := &paymentsv1.PaymentIntent{Id: "pi_acme", State: paymentsv1.State_STATE_CREATED, Amount: "1", CreateTime: timestamppb.New(t0)}
	if err := r.Intents().CreateIntent(tx.Context(context.Background()), "acme", "k", pi); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background(), rec.Completed(&storage.Result{})); err != nil {
		t.Fatal(err)
	}
	if _, ints := r.rows(t, from); ints["acme"] != 1 {
		t.Errorf("the claim's pod %s holds %d intents of acme, want 1", from, ints["acme"])
	}
	if recs, ints := r.rows(t, to); ints["acme"] != 0 || recs["acme"] != 0 {
		t.Errorf("the pod acme was moved to holds %d records and %d intents of it, want none", recs["acme"], ints["acme"])
	}
}

// setPlacement writes principal's placement in etcd, as a move's flip
// does, and waits until r's directory has it.
func (r replica) setPlacement(t *testing.T, principal, pod string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.w.etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(context.Background(), prefixOf(r.dir)+"placement/"+principal, `{"pod":"`+pod+`"}`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pl, ok := r.Directory().Lookup(principal); ok && pl.Pod == pod {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the directory did not see %s placed on %s", principal, pod)
		}
	}
}

// TestRouter_FanOut_AcrossPods_LeftoverCopiesDropped: the claims in
// flight, a key and an intent are found whichever pod holds them, in key
// order; what a pod holds of a principal placed elsewhere is not an
// answer.
func TestRouter_FanOut_AcrossPods_LeftoverCopiesDropped(t *testing.T) {
	r := newWorld(t).replica(t, t.TempDir())
	ctx := context.Background()
	var principals []string
	for i := range 8 {
		p := fmt.Sprintf("m%d", i)
		principals = append(principals, p)
		req := storage.ClaimRequest{Key: storage.RecordKey{Scope: p, Key: "k"}, Scheme: "test", Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
		if _, _, err := r.Records().Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := r.create(p, "c"); err != nil {
			t.Fatal(err)
		}
	}
	var listed []string
	for after := (storage.RecordKey{}); ; {
		page, err := r.Records().InFlight(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, kr := range page {
			listed = append(listed, kr.Key.Scope)
		}
		after = page[len(page)-1].Key
	}
	if fmt.Sprint(listed) != fmt.Sprint(principals) {
		t.Errorf("in flight, in pages of 3: %v; want %v", listed, principals)
	}
	found, err := r.Records().(storage.KeyFinder).FindKey(ctx, "k", 100)
	if err != nil || len(found) != 8 || found[0].Key.Scope != "m0" || found[7].Key.Scope != "m7" {
		t.Errorf("FindKey(k) = %d records, %v; want 8, m0 to m7", len(found), err)
	}
	finder := r.Intents().(interface {
		FindIntent(context.Context, string) (server.FoundIntent, error)
	})
	if f, err := finder.FindIntent(ctx, "pi_m3_c"); err != nil || f.Owner != "m3" {
		t.Errorf("FindIntent(pi_m3_c) = %+v, %v; want m3's", f, err)
	}
	from, _ := r.dirLookup("m3")
	r.setPlacement(t, "m3", map[string]string{"a": "b", "b": "a"}[from])
	if f, err := finder.FindIntent(ctx, "pi_m3_c"); !errors.Is(err, server.ErrNotFound) {
		t.Errorf("FindIntent of a copy left on the pod m3 moved from = %+v, %v; want not found", f, err)
	}
}

// TestRouter_EtcdDown_KnownServed_NewRefusedWithRetryDelay: with etcd
// down, a principal already placed creates and replays; a new one is
// refused UNAVAILABLE, IDEMPOTENCY_SCOPE_UNAVAILABLE, retry after 1s.
func TestRouter_EtcdDown_KnownServed_NewRefusedWithRetryDelay(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, t.TempDir())
	first, err := r.create("known", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.etcd.Member(0).Kill(); err != nil {
		t.Fatal(err)
	}
	if again, err := r.create("known", "k1"); err != nil || again.Id != first.Id {
		t.Errorf("replay with etcd down: %v, %v", again, err)
	}
	if _, err := r.create("known", "k2"); err != nil {
		t.Errorf("a new key of a known principal with etcd down: %v", err)
	}
	_, err = r.create("new", "k1")
	var refusal *once.Refusal
	if !errors.As(err, &refusal) || refusal.Reason() != wire.ReasonScopeUnavailable || refusal.RetryDelay() != pods.RetryAfter || !once.Retryable(err) {
		t.Fatalf("a new principal with etcd down: %v; want retryable %s after %v", err, wire.ReasonScopeUnavailable, pods.RetryAfter)
	}
	if err := w.etcd.Member(0).Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err = r.create("new", "k1"); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("a new principal with etcd back: %v", err)
	}
}

// TestRouter_PodDown_ItsPrincipalsRefused_OthersServed: pod b's
// PostgreSQL is killed. b's principals fail, a's create on, the router
// still serves; b's recover once it is back, each key once.
func TestRouter_PodDown_ItsPrincipalsRefused_OthersServed(t *testing.T) {
	second, stop, err := pgtest.Start()
	if err != nil {
		t.Fatalf("a second PostgreSQL: %v", err)
	}
	t.Cleanup(stop)
	w := newWorld(t)
	w.clusters["b"] = second
	r := w.replica(t, t.TempDir())
	on := map[string]string{} // pod → a principal placed on it
	for i := 0; len(on) < 2; i++ {
		p := fmt.Sprintf("m%d", i)
		if _, err := r.create(p, "before"); err != nil {
			t.Fatal(err)
		}
		pod, _ := r.dirLookup(p)
		on[pod] = p
	}
	second.Kill(t)
	for i := range 20 {
		if _, err := r.create(on["a"], fmt.Sprintf("during-%d", i)); err != nil {
			t.Fatalf("pod a's principal with pod b down: %v", err)
		}
	}
	if _, err := r.create(on["b"], "during"); status(err) != "UNAVAILABLE" {
		t.Errorf("pod b's principal with pod b down: %v, want UNAVAILABLE", err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Errorf("Check with one pod of two down: %v, want nil", err)
	}
	// Sweeping far ahead: pod a's records go, pod b's failure is named.
	swept, err := r.Records().Sweep(context.Background(), time.Now().Add(48*time.Hour))
	if swept != 21 || err == nil || !strings.Contains(err.Error(), "pod b") {
		t.Errorf("Sweep with pod b down = %d, %v; want pod a's 21 records swept and pod b named", swept, err)
	}
	if h := r.Health(); h["a"] != nil || h["b"] == nil {
		t.Errorf("Health = %v, want a serving and b down", h)
	}
	second.StartAgain(t)
	var again error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, again = r.create(on["b"], "during"); again == nil {
			break
		}
	}
	if again != nil {
		t.Fatalf("pod b's principal with pod b back: %v", again)
	}
	if recs, ints := r.rows(t, "b"); recs[on["b"]] != 2 || ints[on["b"]] != 2 { // kept by the sweep it missed
		t.Errorf("pod b holds %d records, %d intents of %s; want 2 and 2", recs[on["b"]], ints[on["b"]], on["b"])
	}
}

// status is the code of a refusal, or the error.
func status(err error) string {
	var refusal *once.Refusal
	if errors.As(err, &refusal) {
		return refusal.Code().String()
	}
	return fmt.Sprint(err)
}
