package main

// The clients of the replica tests: keys sent to several replicas at once
// and retried until answered, and the checks at the end that every key
// has exactly one intent, answered the same every time, on every replica.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/wire"
)

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
	// failedOf counts each token's calls that failed: UNAVAILABLE or
	// DEADLINE_EXCEEDED.
	failedOf map[string]int

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
	return startReplicaLoadAs(t, rs, []string{"replica-test-token-a", "replica-test-token-b"}, anomaly)
}

// startReplicaLoadAs is startReplicaLoad, its keys spread over the
// principals of tokens (dev mode: each token its own principal).
func startReplicaLoadAs(t *testing.T, rs *replicaSet, tokens []string, anomaly func(format string, args ...any)) *replicaLoad {
	if anomaly == nil {
		anomaly = t.Errorf
	}
	l := &replicaLoad{t: t, rs: rs, tokens: tokens, anomaly: anomaly,
		keys: map[string]*replicaKey{}, failedOf: map[string]int{}, stop: make(chan struct{})}
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
			l.failed(k.token)
		case code == codes.DeadlineExceeded:
			l.deadlines.Add(1)
			l.failed(k.token)
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

// failed counts a failed call of token's.
func (l *replicaLoad) failed(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failedOf[token]++
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
