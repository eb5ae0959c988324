package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// crashRecord is what the clients of the crash test know of one key.
type crashRecord struct {
	body   *paymentsv1.CreatePaymentIntentRequest
	answer []byte // deterministic encoding of the first answer that arrived
	id     string
}

// TestCrash_KillNineNeverDuplicatesOrLoses kills paymentsd with SIGKILL under
// load, round after round, and retries every key whose answer the crash hid.
// An intent commits together with its key's answer, so a crash leaves either
// both or neither: every stored intent must be the one its key answered with,
// and no key may have two.
func TestCrash_KillNineNeverDuplicatesOrLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	// The size comes from the environment, so that CI runs a short version
	// and `make crashtest` a long one: PAYMENTSD_CRASH_ROUNDS kill -9 rounds
	// (default 20).
	rounds := envInt("PAYMENTSD_CRASH_ROUNDS", 20)
	const (
		workers = 16
		token   = "crash-test-token"
	)
	dbPath := filepath.Join(t.TempDir(), "paymentsd.db")
	var (
		mu        sync.Mutex
		keys      = map[string]*crashRecord{}
		requests  atomic.Int64
		replays   int
		takeovers int
		logs      []string
	)

	// record checks one answer for key against everything answered before.
	record := func(key string, resp *paymentsv1.CreatePaymentIntentResponse) {
		b := deterministic(t, resp)
		mu.Lock()
		defer mu.Unlock()
		k := keys[key]
		switch {
		case k.answer == nil:
			k.answer, k.id = b, resp.PaymentIntent.Id
		case k.id != resp.PaymentIntent.Id:
			t.Errorf("key %s saw two intents: %s and %s", key, k.id, resp.PaymentIntent.Id)
		case !bytes.Equal(k.answer, b):
			t.Errorf("key %s: answer changed:\n%x\n%x", key, k.answer, b)
		}
	}

	// finish retries key until it has a final answer.
	finish := func(d *daemon, key string) {
		mu.Lock()
		body, answered := keys[key].body, keys[key].answer != nil
		mu.Unlock()
		for attempt := 0; ; attempt++ {
			if attempt == 100 {
				t.Fatalf("key %s: no final answer after 100 retries", key)
			}
			requests.Add(1)
			a := d.create(withCreds(token, key), body)
			if status.Code(a.err) == codes.Aborted && reason(a.err) == wire.ReasonKeyInUse {
				t.Errorf("key %s in flight after restart: orphans must be taken over at once", key)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if a.err != nil {
				t.Fatalf("key %s: %v", key, a.err)
			}
			if answered && !a.replayed() {
				t.Errorf("key %s was answered before the crash but ran again", key)
			}
			record(key, a.resp.(*paymentsv1.CreatePaymentIntentResponse))
			return
		}
	}

	next := 0
	for round := range rounds {
		d := start(t, spec{db: dbPath})

		// Keys whose outcome the crash hid are retried to the end; a sample
		// of the answered ones must replay as they were answered.
		mu.Lock()
		var old []string
		for k, r := range keys {
			if r.answer == nil || rand.IntN(len(keys)) < 200 {
				old = append(old, k)
			}
		}
		mu.Unlock()
		for _, k := range old {
			finish(d, k)
		}
		replays += len(old)

		// Every third round the disk is slow (fsyncs delayed 20 ms by
		// strace), so that the kill lands in the middle of commits more often.
		if round%3 == 2 {
			slowFsync(t, d, 20*time.Millisecond)
		}

		// Load with fresh keys, then kill -9 at a random moment.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					next++
					key := fmt.Sprintf("crash-%d-%d", round, next)
					body := seedRequest(strconv.Itoa(next)) // the amount names the key
					keys[key] = &crashRecord{body: body}
					mu.Unlock()
					requests.Add(1)
					a := d.create(withCreds(token, key), body)
					if a.err == nil {
						record(key, a.resp.(*paymentsv1.CreatePaymentIntentResponse))
					} else if code := status.Code(a.err); code != codes.Unavailable && code != codes.Canceled {
						t.Errorf("key %s under load: %v", key, a.err)
					}
				}
			})
		}
		time.Sleep(time.Duration(50+rand.IntN(300)) * time.Millisecond)
		d.kill()
		close(stop)
		wg.Wait()
		logs = append(logs, d.stderr())

		db, err := boltstore.Open(dbPath, nil)
		if err != nil {
			t.Fatalf("round %d: data file does not open after kill -9: %v", round, err)
		}
		if err := db.Check(); err != nil {
			t.Fatalf("round %d: data file is damaged after kill -9: %v", round, err)
		}
		db.Close()
	}

	// A last restart re-checks every key, then the books are balanced.
	d := start(t, spec{db: dbPath})
	mu.Lock()
	var all []string
	for k := range keys {
		all = append(all, k)
	}
	mu.Unlock()
	for _, k := range all {
		finish(d, k)
	}
	// Every stored intent must be its key's answer: the amount tells the
	// key, so an intent no answer names is either an orphan (its key's run
	// stored it but was never answered) or a key's second intent.
	keyOf := map[string]string{} // amount → key
	returned := map[string]bool{}
	for k, r := range keys {
		keyOf[r.body.Amount] = k
		returned[r.id] = true
	}
	intents := listAll(t, d, token)
	stored := map[string]bool{}
	byKey := map[string][]string{}
	var orphans []string
	for _, pi := range intents {
		stored[pi.Id] = true
		byKey[keyOf[pi.Amount]] = append(byKey[keyOf[pi.Amount]], pi.Id)
		if !returned[pi.Id] {
			orphans = append(orphans, fmt.Sprintf("%s (amount %s, key %q)", pi.Id, pi.Amount, keyOf[pi.Amount]))
		}
	}
	if len(orphans) > 0 {
		t.Errorf("%d orphan intents, named by no key's answer; want 0:\n%s", len(orphans), strings.Join(orphans, "\n"))
	}
	for k, ids := range byKey {
		if len(ids) > 1 {
			t.Errorf("key %q has %d intents %v; want 1", k, len(ids), ids)
		}
	}
	for k, r := range keys {
		if !stored[r.id] {
			t.Errorf("key %s was answered with intent %s, which is not stored", k, r.id)
		}
	}
	if len(intents) != len(keys) {
		t.Errorf("%d intents stored for %d keys; want one each", len(intents), len(keys))
	}
	for _, l := range append(logs, d.stderr()) {
		takeovers += strings.Count(l, `"idempotency":"takeover"`)
	}
	t.Logf("crash test: %d rounds, %d keys, %d requests, %d retries of earlier keys after restarts, %d takeovers, %d orphan intents",
		rounds, len(keys), requests.Load(), replays, takeovers, len(orphans))
}

// listAll pages through every intent of token's principal.
func listAll(t *testing.T, d *daemon, token string) []*paymentsv1.PaymentIntent {
	t.Helper()
	var all []*paymentsv1.PaymentIntent
	req := &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000}
	for {
		resp, err := d.client.ListPaymentIntents(withCreds(token, ""), req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, resp.PaymentIntents...)
		if req.PageToken = resp.NextPageToken; req.PageToken == "" {
			return all
		}
	}
}
