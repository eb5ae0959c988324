package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/console"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/testkit/logbuf"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// pgRuns makes each database new, in every run of a test (go test -count).
var pgRuns atomic.Int64

// replica is a console served by one of the processes that share a
// PostgreSQL database, over its own store.
type replica struct {
	*fixture
	db *pgstore.DB
}

// startPG serves two replicas' consoles over a new database: here and
// other, as two paymentsd processes would. Their clocks move together
// (advance). The stores judge leases by the times the tests pass.
func startPG(t *testing.T) (here, other *replica) {
	t.Helper()
	url := pgtest.Require(t, cluster).NewDatabase(t, fmt.Sprintf("console_%d", pgRuns.Add(1)))
	skew := new(atomic.Int64)
	return serveReplica(t, url, skew), serveReplica(t, url, skew)
}

// serveReplica opens a store on the database at url and serves its
// console, whose clock is skew ahead of time.Now.
func serveReplica(t *testing.T, url string, skew *atomic.Int64) *replica {
	t.Helper()
	ctx := context.Background()
	db, err := pgstore.Open(ctx, url, &pgstore.Options{CallerClock: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	intents, err := pgintents.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParseKeys([]byte(auth.KeyLine("carol", operatorToken)+"\n"), "admin-keys")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{log: new(logbuf.Buffer), operators: new(atomic.Pointer[auth.Keys]), skew: skew}
	f.operators.Store(keys)
	c := console.New(console.Config{Store: db, Intents: intents, Operators: f.operators.Load, Log: slog.New(slog.NewJSONHandler(f.log, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return &replica{fixture: f, db: db}
}

// store stores result for key as a transactional method does: its claim
// and result in one commit.
func (r *replica) store(t *testing.T, key string, result *storage.Result) {
	t.Helper()
	ctx := context.Background()
	_, rec, tx, err := r.db.ClaimTx(ctx, claimReq(key, time.Now()), storage.Transactional)
	if err != nil || tx == nil {
		t.Fatalf("claim of %s: %v", key, err)
	}
	if err := tx.Commit(ctx, rec.Completed(result)); err != nil {
		t.Fatal(err)
	}
}

// With PostgreSQL, a key released and not used since shows its history,
// answered 200, and its next request runs afresh; the page says what it
// cannot see: another replica's claim not yet committed. A key never
// used is a 404 that says so too.
func TestPG_ReleasedKey_ShowsItsHistory(t *testing.T) {
	here, _ := startPG(t)
	here.store(t, "order-1", invalid())
	if a := here.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"order-1"}}); a.status != http.StatusOK {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	a := here.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Errorf("the released key's page: %d, want 200", a.status)
	}
	wantAll(t, "the released key's page", a.body,
		`<td id="state">released: no record is stored</td>`,
		`<td id="next-request">The next request with the key runs afresh: no record of it is stored. A claim another process holds and has not committed yet is not seen here.</td>`,
		`<td>carol</td><td>1</td><td class="code-error">INVALID_ARGUMENT</td><td>amount must be positive</td></tr>`)
	a = here.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusOK || v["released"] != true || len(v["releases"].([]any)) != 1 {
		t.Errorf("the released key in the JSON API: %d %s", a.status, a.body)
	}
	a = here.call(t, "GET", "/api/v1/record"+query("never-used"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusNotFound || !strings.Contains(v["message"].(string), "never used, or expired and swept. A claim another process holds") {
		t.Errorf("a key never used: %d %s", a.status, a.body)
	}
}

// With PostgreSQL, a transactional claim not yet committed holds no row,
// only the key's lock. The replica holding it shows it in flight and
// refuses its release as in flight, without waiting for the lock. The
// other replica cannot see it, and says so. Its store's release waits
// for the lock, then refuses it as in flight too. Once the lease ran out,
// a retry on the other replica is still told the key is in flight, as
// the holder's page says.
func TestPG_AHeldTransactionalClaim_IsInFlight(t *testing.T) {
	here, other := startPG(t)
	now := time.Now()
	tx := claimTx(t, here.db, "held", storage.Transactional, now)
	a := here.call(t, "GET", keyPath("held"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Errorf("the held key's page: %d, want 200", a.status)
	}
	wantAll(t, "the held key's page", a.body,
		`<td id="state">in flight: a handler of this process holds the key</td>`,
		`<td id="holder">this process, which holds the claim in its memory: it is not stored until it commits</td>`,
		`<td id="next-retry">This process holds the claim and still runs its handler or commit: a retry is told the key is in flight`,
		`<td id="transactional">yes`)
	if v := decode(t, here.call(t, "GET", "/api/v1/record"+query("held"), operatorToken, nil)); v["found"] != true || v["stored"] != false {
		t.Errorf("the held key in the JSON API: %v", v)
	}
	refusesInFlight(t, here.fixture, "held")

	if a := other.call(t, "GET", "/api/v1/record"+query("held"), operatorToken, nil); a.status != http.StatusNotFound ||
		!strings.Contains(a.body, "A claim another process holds and has not committed yet is not seen here.") {
		t.Errorf("the held key on the other replica: %d %s", a.status, a.body)
	}
	a = other.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"held"}})
	if v := decode(t, a); a.status != http.StatusConflict || v["refusal"] != "in_flight" {
		t.Errorf("the release of the held key on the other replica: %d %s", a.status, a.body)
	}

	here.advance(2 * time.Minute)
	wantAll(t, "the held key's page once its lease ran out", here.call(t, "GET", keyPath("held"), operatorToken, nil).body,
		`<td id="lease">ran out 1m0s ago; it does not apply while this process holds the claim</td>`,
		`<td id="next-retry">This process holds the claim and still runs its handler or commit`)
	if got := retry(t, other.db, "held", storage.Transactional, now.Add(2*time.Minute)); got != storage.OutcomeInFlight {
		t.Errorf("a retry on the other replica once the lease ran out: %v, want in flight, as the page says", got)
	}
	tx.Rollback()
	if a := here.call(t, "GET", keyPath("held"), operatorToken, nil); a.status != http.StatusNotFound {
		t.Errorf("the key once its Tx ended without a result: %d, want 404", a.status)
	}
}

// With PostgreSQL, a durable claim another replica made, whose lease ran
// out, is taken over by a retry here. The page says so, unless the retry
// reaches the process that made it while it still runs it: it cannot
// know whether that process is alive, and promises nothing.
func TestPG_ALapsedClaimOfAnotherReplica(t *testing.T) {
	here, other := startPG(t)
	now := time.Now()
	if _, _, err := other.db.Claim(context.Background(), claimReq("durable", now)); err != nil {
		t.Fatal(err)
	}
	here.advance(2 * time.Minute)
	wantAll(t, "the page of another replica's claim", here.call(t, "GET", keyPath("durable"), operatorToken, nil).body,
		`<td id="state">in flight, its lease ran out</td>`,
		`<td class="mono" id="owner">`+other.db.Claimant().ID+`</td>`,
		`<td id="holder">another process made the claim</td>`,
		`<td id="next-retry">The lease ran out: a retry takes the claim over, unless the retry reaches the process that made the claim (its owner) `+
			`while that process still runs its handler or commit: that process tells it the key is in flight. Whether it still runs it, the console cannot tell.</td>`)
	if got := retry(t, here.db, "durable", storage.Durable, now.Add(2*time.Minute)); got != storage.OutcomeTakeover {
		t.Errorf("a retry here: %v, want a takeover", got)
	}
}

// With PostgreSQL, a principal's intents are listed newest first,
// filtered and paged, and the same payment made under two keys is found,
// not two payments that differ, as on bbolt.
func TestPG_IntentsAndDuplicates(t *testing.T) {
	here, _ := startPG(t)
	intents, err := pgintents.New(context.Background(), here.db)
	if err != nil {
		t.Fatal(err)
	}
	checkShop(t, here.fixture, seedShop(t, intents, time.Now()))
	a := here.call(t, "GET", "/api/v1/intents?principal=alice&limit=1001", operatorToken, nil)
	if a.status != http.StatusBadRequest {
		t.Errorf("a limit of 1001: %d %s", a.status, a.body)
	}
}
