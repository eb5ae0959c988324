package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/wire"
)

// replicaRounds is the number of rounds of TestCrash_Replicas_PostgreSQL:
// PAYMENTSD_REPLICA_ROUNDS if set, else PAYMENTSD_CRASH_ROUNDS capped at
// maxReplicaRounds (make crashtest's 200 rounds of this test would take
// the better part of an hour), else 6 (make test: about half a minute).
func replicaRounds() int {
	if n := envInt("PAYMENTSD_REPLICA_ROUNDS", 0); n > 0 {
		return n
	}
	return min(envInt("PAYMENTSD_CRASH_ROUNDS", 6), maxReplicaRounds)
}

// maxReplicaRounds caps PAYMENTSD_CRASH_ROUNDS for the replica test: 30
// rounds of about 2 s of load take a few minutes.
const maxReplicaRounds = 30

// replicaCallTimeout bounds each call of the replica test's clients: a
// call that outlasts it is retried like any other failure.
const replicaCallTimeout = 5 * time.Second

// replicaKey is what the replica test's clients know of one key.
type replicaKey struct {
	token  string
	body   *paymentsv1.CreatePaymentIntentRequest
	answer []byte // deterministic encoding of the first OK answer
	intent *paymentsv1.PaymentIntent
	fresh  int // OK answers not marked as replays: the run that stored the intent, at most one
	// answeredAt is when the first OK answer arrived.
	answeredAt time.Time
}

// replicaSet is the three paymentsd processes of the replica test. A slot
// is nil while its process is down; a restarted one listens on a new port,
// and clients find it here.
type replicaSet struct {
	t    *testing.T
	dbs  [3]string // --db of each: replica 2's goes through the proxy
	args []string

	mu    sync.Mutex
	live  [3]*daemon
	all   []replicaProcess // every process started, for the logs
	fails int              // starts that exited before listening
}

// replicaProcess is a process started as replica i.
type replicaProcess struct {
	i int
	d *daemon
}

// start starts replica i and waits until it listens. A replica whose
// database connection is cut while it connects and migrates exits, as it
// should; like a supervisor, start tries again (replica 2 only: the others'
// connections are never cut, and the database is up while replicas start).
func (rs *replicaSet) start(i int) {
	t := rs.t
	t.Helper()
	// Tries are bounded by time, not count: on a loaded machine a start
	// takes longer than the 300 ms between cuts more often.
	for began := time.Now(); ; {
		d := launch(t, rs.dbs[i], append(rs.args[:len(rs.args):len(rs.args)], replicaArgs(i)...)...)
		rs.mu.Lock()
		rs.all = append(rs.all, replicaProcess{i, d})
		rs.mu.Unlock()
		select {
		case addr := <-d.listening():
			d.addr = addr
		case <-d.exited:
			if i == 2 && time.Since(began) < time.Minute {
				rs.mu.Lock()
				rs.fails++
				rs.mu.Unlock()
				t.Logf("replica %d exited while starting (its connections are cut), starting it again: %v", i, replicaLastLine(d.stderr()))
				continue
			}
			t.Fatalf("replica %d exited while starting: %v\n%s", i, d.err, d.stderr())
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d did not start listening:\n%s", i, d.stderr())
		}
		conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		d.client = paymentsv1.NewPaymentIntentServiceClient(conn)
		rs.mu.Lock()
		rs.live[i] = d
		rs.mu.Unlock()
		return
	}
}

// replicaArgs are replica i's own flags: replica 2, whose connections are
// cut, also makes a duplicate wait for the request in flight (woken by
// LISTEN/NOTIFY on a connection that is cut too); 0 and 1 answer ABORTED
// at once.
func replicaArgs(i int) []string {
	if i == 2 {
		return []string{"--in-flight-wait", "1s"}
	}
	return nil
}

// kill kills replica i with SIGKILL.
func (rs *replicaSet) kill(i int) {
	rs.mu.Lock()
	d := rs.live[i]
	rs.live[i] = nil
	rs.mu.Unlock()
	d.cmd.Process.Kill()
	<-d.exited
}

// pick returns up to n distinct live replicas, at random.
func (rs *replicaSet) pick(n int) []*daemon {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var ds []*daemon
	for _, d := range rs.live {
		if d != nil {
			ds = append(ds, d)
		}
	}
	rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds[:min(n, len(ds))]
}

func (rs *replicaSet) daemons() []*daemon {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.live[:])
}

func replicaLastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// TestCrash_Replicas_PostgreSQL runs three paymentsd replicas on one
// PostgreSQL database, replica 2 through a proxy that cuts its database
// connections at random, and sends every key's create to two or three
// replicas at the same moment, retrying it (same key, same body) on a
// random live replica until an answer arrives. Round after round one
// replica is killed with SIGKILL under load and started again on a new
// port; once every ten rounds (in the middle round of a shorter run)
// PostgreSQL itself crashes (immediate shutdown) and restarts under load.
//
// On PostgreSQL a create's claim, intent and answer commit in one
// transaction, whichever replica runs it, so at the end every key must
// have exactly one intent, its every answer the same bytes, every stored
// intent some key's answer (0 orphans), and every replica must read and
// list the same intents.
//
// Size: replicaRounds (PAYMENTSD_REPLICA_ROUNDS, else PAYMENTSD_CRASH_ROUNDS
// capped at 30, else 6 rounds: about 30 s; make crashtest's 30 rounds take
// a few minutes).
func TestCrash_Replicas_PostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	c := pgtest.Require(t, pgCluster)
	rounds := replicaRounds()
	began := time.Now()

	db := c.NewDatabase(t, pgtest.DatabaseName(t.Name()+" "+began.Format(time.RFC3339Nano)))
	proxy, err := faultproxy.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxied, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxied.Host = proxy.Addr()
	rs := &replicaSet{t: t, dbs: [3]string{db, db, proxied.String()}, args: []string{"--db-pool", "8"}}
	t.Cleanup(func() {
		if t.Failed() {
			saveReplicaLogs(t, rs)
		}
	})
	for i := range 3 {
		rs.start(i)
	}
	proxy.CutEvery(300 * time.Millisecond)
	load := startReplicaLoad(t, rs, nil)

	// The chaos: a replica killed each round, the database crashed now and
	// then, the proxy cutting all along.
	kills, pgRestarts := 0, 0
	for round := range rounds {
		before := load.answered.Load()
		pause := time.Duration(1500+rand.IntN(1000)) * time.Millisecond
		pgRestart := round%10 == min(rounds, 10)/2
		if pgRestart {
			time.Sleep(pause / 2)
			c.Restart(t)
			pgRestarts++
			time.Sleep(pause / 2)
		} else {
			time.Sleep(pause)
		}
		victim := round % 3
		rs.kill(victim)
		kills++
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond) // clients meet it dead
		rs.start(victim)
		what := fmt.Sprintf("replica %d killed and restarted", victim)
		if pgRestart {
			what += ", PostgreSQL restarted"
		}
		t.Logf("round %d: %s; %d keys answered", round, what, load.answered.Load()-before)
	}
	load.halt()
	proxy.CutEvery(0)
	cuts := proxy.Cuts()
	loadTime := time.Since(began)
	unanswered := len(load.keys) - int(load.answered.Load()) // left to answerAll

	load.answerAll()
	found := load.check()

	// A create's claim commits with its intent and answer, never in flight
	// on its own, so no claim is ever left for a retry to take over.
	takeovers := 0
	rs.mu.Lock()
	for _, s := range rs.all {
		takeovers += strings.Count(s.d.stderr(), `"idempotency":"takeover"`)
	}
	fails := rs.fails
	rs.mu.Unlock()
	if takeovers > 0 {
		t.Errorf("%d takeovers logged; a transactional create leaves no claim in flight to take over", takeovers)
	}
	if cuts == 0 {
		t.Errorf("the proxy cut no connection: replica 2 was never cut off")
	}

	t.Logf("replica test: %d rounds, %d keys, %d requests, %d kills, %d PostgreSQL restarts, %d connections cut by the proxy "+
		"(%d starts of replica 2 cut short), %d replays, %d ABORTED in use, %d UNAVAILABLE, %d DEADLINE_EXCEEDED, "+
		"%d keys unanswered when the chaos stopped, %d keys whose storing run's answer was lost, "+
		"%d takeovers, %d orphan intents; %v of chaos, %v in all",
		rounds, len(load.keys), load.requests.Load(), kills, pgRestarts, cuts, fails, load.replays.Load(), load.aborted.Load(),
		load.unavailable.Load(), load.deadlines.Load(), unanswered, load.answersLost(), takeovers, len(found.orphans),
		loadTime.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// replicaWorkers is the number of clients of a replicaLoad.
const replicaWorkers = 12

// replicaLoad is the clients of the replica tests: replicaWorkers workers,
// each sending a new key's create to two or three replicas at the same
// moment, then again (same key, same body) to one random live replica at a
// time until an answer arrives, and what they saw of every key.
type replicaLoad struct {
	t      *testing.T
	rs     *replicaSet
	tokens []string
	// anomaly reports what the end checks must never find (a key run
	// twice, a changed answer, an orphan): t.Errorf, unless a measurement
	// that expects some counts them.
	anomaly func(format string, args ...any)

	mu   sync.Mutex
	keys map[string]*replicaKey

	next, requests, replays         atomic.Int64
	aborted, unavailable, deadlines atomic.Int64
	answered                        atomic.Int64 // keys with an OK answer
	// changed counts answers unlike their key's first: a second run, a
	// second intent, other bytes.
	changed atomic.Int64
	stop    chan struct{}
	stopped atomic.Bool
	wg      sync.WaitGroup
	halt    func() // stops the workers and waits for them
}

// startReplicaLoad starts the workers on rs's replicas; anomaly nil is
// t.Errorf.
func startReplicaLoad(t *testing.T, rs *replicaSet, anomaly func(format string, args ...any)) *replicaLoad {
	if anomaly == nil {
		anomaly = t.Errorf
	}
	l := &replicaLoad{t: t, rs: rs, tokens: []string{"replica-test-token-a", "replica-test-token-b"}, anomaly: anomaly,
		keys: map[string]*replicaKey{}, stop: make(chan struct{})}
	l.halt = sync.OnceFunc(func() {
		l.stopped.Store(true)
		close(l.stop)
		l.wg.Wait()
	})
	t.Cleanup(l.halt) // a Fatal must not leave clients running
	for range replicaWorkers {
		l.wg.Go(l.work)
	}
	return l
}

// try sends key's create to d once and records an OK answer; it reports
// whether one arrived. Anything but OK, ABORTED (in use), UNAVAILABLE and
// DEADLINE_EXCEEDED is an error: no other answer is expected of a valid
// body, and none may be stored.
func (l *replicaLoad) try(d *daemon, key string) bool {
	t := l.t
	l.mu.Lock()
	k := l.keys[key]
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(withCreds(k.token, key), replicaCallTimeout)
	defer cancel()
	l.requests.Add(1)
	a := d.create(ctx, k.body)
	if a.err != nil {
		switch code := status.Code(a.err); {
		case l.stopped.Load(), code == codes.Canceled && t.Failed():
			// The test is ending (after a Fatal, maybe): its processes
			// and connections go away.
		case code == codes.Aborted && reason(a.err) == wire.ReasonKeyInUse:
			l.aborted.Add(1)
		case code == codes.Unavailable:
			l.unavailable.Add(1)
		case code == codes.DeadlineExceeded:
			l.deadlines.Add(1)
		default:
			t.Errorf("key %s on %s: unexpected answer %v (replayed %t)", key, d.addr, a.err, a.replayed())
		}
		return false
	}
	resp := a.resp.(*paymentsv1.CreatePaymentIntentResponse)
	b := deterministic(t, resp)
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.replayed() {
		l.replays.Add(1)
	} else if k.fresh++; k.fresh == 2 {
		l.changed.Add(1)
		l.anomaly("key %s ran twice: a second answer not marked as a replay, from %s", key, d.addr)
	}
	switch {
	case k.answer == nil:
		k.answer, k.intent, k.answeredAt = b, resp.PaymentIntent, time.Now()
		l.answered.Add(1)
	case k.intent.Id != resp.PaymentIntent.Id:
		l.changed.Add(1)
		l.anomaly("key %s saw two intents: %s and %s (from %s)", key, k.intent.Id, resp.PaymentIntent.Id, d.addr)
	case !bytes.Equal(k.answer, b):
		l.changed.Add(1)
		l.anomaly("key %s: answer changed (from %s):\n%v\n%v", key, d.addr, k.intent, resp.PaymentIntent)
	}
	return true
}

// replicaBackoff is the pause before a key's next try.
func replicaBackoff(attempt int) time.Duration {
	return time.Duration(10<<min(attempt, 4)+rand.IntN(20)) * time.Millisecond
}

// work is one worker: new keys, one after the other, until halt.
func (l *replicaLoad) work() {
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		n := l.next.Add(1)
		key := fmt.Sprintf("replica-%d", n)
		body := seedRequest(strconv.FormatInt(n, 10)) // the amount names the key
		// The longest expiry: an intent read back at the end, in a run of
		// make crashtest past 15 minutes, is not yet expired.
		body.ExpiresInSeconds = int32(server.MaxExpiresIn.Seconds())
		k := &replicaKey{token: l.tokens[n%int64(len(l.tokens))], body: body}
		l.mu.Lock()
		l.keys[key] = k
		l.mu.Unlock()

		// Duplicates racing across replicas.
		ready := make(chan struct{})
		ok := make(chan bool, 3)
		ds := l.rs.pick(2 + rand.IntN(2))
		for _, d := range ds {
			go func() {
				<-ready
				ok <- l.try(d, key)
			}()
		}
		close(ready)
		done := false
		for range ds {
			done = <-ok || done
		}
		// Then the same request again until it is answered; a key
		// still unanswered when the test stops is finished after.
		for attempt := 0; !done; attempt++ {
			select {
			case <-l.stop:
				return
			case <-time.After(replicaBackoff(attempt)):
			}
			if ds := l.rs.pick(1); len(ds) == 1 {
				done = l.try(ds[0], key)
			}
		}
	}
}

// all is every key sent.
func (l *replicaLoad) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []string
	for key := range l.keys {
		all = append(all, key)
	}
	return all
}

// answerAll sends every key again, after halt, until it has an answer: one
// answered before must replay it (a second answer not marked as a replay
// is a second run).
func (l *replicaLoad) answerAll() {
	t := l.t
	l.stopped.Store(false)
	replicaParallel(replicaWorkers, l.all(), func(key string) {
		deadline := time.Now().Add(time.Minute)
		for attempt := 0; ; attempt++ {
			if ds := l.rs.pick(1); len(ds) == 1 && l.try(ds[0], key) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("key %s: no answer after %d tries in %v since the chaos stopped", key, attempt+1, time.Minute)
				return
			}
			time.Sleep(replicaBackoff(attempt))
		}
	})
	for key, k := range l.keys {
		if k.intent == nil {
			t.Fatalf("key %s (and maybe others) has no answer: nothing more to check", key)
		}
	}
}

// replicaFindings is what check found wrong, each once however many
// replicas saw it.
type replicaFindings struct {
	orphans    map[string]bool // stored intents no key's answer names
	twoIntents map[string]bool // keys with more than one intent stored
	missing    map[string]bool // keys whose answered intent is not stored
}

// check reads every key's intent, as answered, from every replica, and
// lists every stored intent: each must be its key's answer, one per key.
// Run it after answerAll.
func (l *replicaLoad) check() replicaFindings {
	t := l.t
	f := replicaFindings{orphans: map[string]bool{}, twoIntents: map[string]bool{}, missing: map[string]bool{}}
	var fmu sync.Mutex
	ds := l.rs.daemons()
	replicaParallel(replicaWorkers, l.all(), func(key string) {
		k := l.keys[key]
		for i, d := range ds {
			var (
				resp *paymentsv1.GetPaymentIntentResponse
				err  error
			)
			for attempt := 0; attempt < 20; attempt++ {
				ctx, cancel := context.WithTimeout(withCreds(k.token, ""), replicaCallTimeout)
				resp, err = d.client.GetPaymentIntent(ctx, &paymentsv1.GetPaymentIntentRequest{Id: k.intent.Id})
				cancel()
				if status.Code(err) != codes.Unavailable {
					break
				}
				time.Sleep(replicaBackoff(attempt))
			}
			switch {
			case status.Code(err) == codes.NotFound:
				fmu.Lock()
				f.missing[key] = true
				fmu.Unlock()
				l.anomaly("key %s: replica %d does not find intent %s, its answer", key, i, k.intent.Id)
			case err != nil:
				t.Errorf("key %s: replica %d reads intent %s: %v", key, i, k.intent.Id, err)
			case !proto.Equal(resp.PaymentIntent, k.intent):
				l.anomaly("key %s: replica %d reads\n%v\nwant the answer's\n%v", key, i, resp.PaymentIntent, k.intent)
			}
		}
	})

	// Every stored intent must be its key's answer: the amount names the
	// key, so an intent no answer names is an orphan (stored, never
	// answered) or a key's second intent.
	keyOf := map[string]string{} // amount → key
	returned := map[string]bool{}
	for key, k := range l.keys {
		keyOf[k.body.Amount] = key
		returned[k.intent.Id] = true
	}
	for i, d := range ds {
		stored := map[string]bool{}
		byKey := map[string][]string{}
		for _, token := range l.tokens {
			for _, pi := range listAllRetrying(t, d, token) {
				stored[pi.Id] = true
				key := keyOf[pi.Amount]
				byKey[key] = append(byKey[key], pi.Id)
				if !returned[pi.Id] {
					f.orphans[pi.Id] = true
					l.anomaly("replica %d lists %s (amount %s, key %q), which no answer named: an orphan", i, pi.Id, pi.Amount, key)
				} else if l.keys[key].token != token {
					t.Errorf("replica %d lists intent %s of key %s under the other principal", i, pi.Id, key)
				}
			}
		}
		for key, ids := range byKey {
			if len(ids) > 1 {
				f.twoIntents[key] = true
				l.anomaly("replica %d: key %q has %d intents %v; want 1", i, key, len(ids), ids)
			}
		}
		for key, k := range l.keys {
			if !stored[k.intent.Id] {
				f.missing[key] = true
				l.anomaly("replica %d: key %s was answered with intent %s, which it does not list", i, key, k.intent.Id)
			}
		}
		if len(stored) != len(l.keys) {
			l.anomaly("replica %d lists %d intents for %d keys; want one each", i, len(stored), len(l.keys))
		}
	}
	return f
}

// answersLost is the number of keys whose intent was stored by a run whose
// own answer never arrived (a kill, a cut or the database's crash at the
// commit): the retries found it and replayed it.
func (l *replicaLoad) answersLost() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for _, k := range l.keys {
		if k.fresh == 0 {
			lost++
		}
	}
	return lost
}

// replicaParallel calls fn for every item, n at a time.
func replicaParallel(n int, items []string, fn func(string)) {
	ch := make(chan string)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for item := range ch {
				fn(item)
			}
		})
	}
	for _, item := range items {
		ch <- item
	}
	close(ch)
	wg.Wait()
}

// listAllRetrying pages through every intent of token's principal on d,
// trying a page again when it is UNAVAILABLE: a replica's pooled connection
// may have been cut before the cutting stopped.
func listAllRetrying(t *testing.T, d *daemon, token string) []*paymentsv1.PaymentIntent {
	t.Helper()
	var all []*paymentsv1.PaymentIntent
	req := &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000}
	for attempt := 0; ; {
		ctx, cancel := context.WithTimeout(withCreds(token, ""), replicaCallTimeout)
		resp, err := d.client.ListPaymentIntents(ctx, req)
		cancel()
		if status.Code(err) == codes.Unavailable && attempt < 20 {
			attempt++
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("list on %s: %v", d.addr, err)
		}
		all = append(all, resp.PaymentIntents...)
		if req.PageToken = resp.NextPageToken; req.PageToken == "" {
			return all
		}
	}
}

// saveReplicaLogs writes the log of every replica process the test started
// to a directory that outlives the test, for the evidence of a failure.
func saveReplicaLogs(t *testing.T, rs *replicaSet) {
	dir, err := os.MkdirTemp("", "paymentsd-replicas-logs-")
	if err != nil {
		t.Logf("saving the replicas' logs: %v", err)
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for n, s := range rs.all {
		name := filepath.Join(dir, fmt.Sprintf("%02d-replica%d-pid%d.log", n, s.i, s.d.cmd.Process.Pid))
		if err := os.WriteFile(name, []byte(s.d.stderr()), 0o600); err != nil {
			t.Logf("saving the replicas' logs: %v", err)
			return
		}
	}
	t.Logf("the logs of the %d replica processes started are in %s", len(rs.all), dir)
}
