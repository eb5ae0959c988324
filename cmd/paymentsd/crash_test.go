package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
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
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
)

// The crash test's size comes from the environment, so that CI runs a short
// version and `make crashtest` a long one:
//
//	PAYMENTSD_CRASH_ROUNDS   kill -9 rounds (default 20)
//	PAYMENTSD_CRASH_EXPIRY   if set, wait for the orphan intents to expire
//	                         and check that they read as canceled (about 65s)
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// crashRecord is what the clients of the crash test know of one key.
type crashRecord struct {
	body   *paymentsv1.CreatePaymentIntentRequest
	answer []byte // deterministic encoding of the first answer that arrived
	id     string
}

func TestCrash_KillNineNeverDuplicatesOrLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
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
			if status.Code(a.err) == codes.Aborted && reason(a.err) == interceptor.ReasonKeyInUse {
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
		d := startDaemon(t, dbPath)

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
					body := seedRequest(strconv.Itoa(next))
					body.ExpiresInSeconds = 60
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
		d.cmd.Process.Kill()
		<-d.exited
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
	d := startDaemon(t, dbPath)
	mu.Lock()
	var all []string
	for k := range keys {
		all = append(all, k)
	}
	mu.Unlock()
	for _, k := range all {
		finish(d, k)
	}
	returned := map[string]bool{}
	for _, k := range keys {
		returned[k.id] = true
	}
	intents := listAll(t, d, token)
	var orphans []*paymentsv1.PaymentIntent
	for _, pi := range intents {
		if !returned[pi.Id] {
			orphans = append(orphans, pi)
		}
	}
	if len(intents) != len(keys)+len(orphans) {
		t.Errorf("%d intents for %d keys and %d orphans", len(intents), len(keys), len(orphans))
	}
	for _, l := range append(logs, d.stderr()) {
		takeovers += strings.Count(l, `"idempotency":"takeover"`)
	}
	t.Logf("crash test: %d rounds, %d keys, %d requests, %d retries of earlier keys after restarts, %d takeovers, %d orphan intents",
		rounds, len(keys), requests.Load(), replays, takeovers, len(orphans))

	// Orphans expire a minute after creation; a long run outlives the
	// first ones, which must then read as canceled by the system.
	for _, pi := range orphans {
		expired := pi.State == paymentsv1.State_STATE_CANCELED &&
			pi.CancellationReason == paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED &&
			pi.CancelTime.AsTime().Equal(pi.ExpireTime.AsTime())
		if pi.ExpireTime.AsTime().Sub(pi.CreateTime.AsTime()) != time.Minute ||
			(pi.State != paymentsv1.State_STATE_CREATED && !expired) {
			t.Errorf("orphan %s: %v, want created, or canceled by expiry, a minute after creation", pi.Id, pi)
		}
	}
	if os.Getenv("PAYMENTSD_CRASH_EXPIRY") == "" || len(orphans) == 0 {
		return
	}
	latest := time.Time{}
	for _, pi := range orphans {
		if at := pi.ExpireTime.AsTime(); at.After(latest) {
			latest = at
		}
	}
	t.Logf("waiting %v for %d orphans to expire", time.Until(latest).Round(time.Second), len(orphans))
	time.Sleep(time.Until(latest) + time.Second)
	canceled := 0
	for _, pi := range listAll(t, d, token) {
		if returned[pi.Id] {
			continue
		}
		if pi.State != paymentsv1.State_STATE_CANCELED || pi.CancellationReason != paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED {
			t.Errorf("orphan %s after expiry: %v %v, want canceled by expiry", pi.Id, pi.State, pi.CancellationReason)
			continue
		}
		canceled++
	}
	t.Logf("%d of %d orphan intents canceled by expiry", canceled, len(orphans))
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
