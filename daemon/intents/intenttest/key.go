package intenttest

import (
	"context"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/once"
)

// Finder is an intent store that finds an intent by its id alone, with
// its owner and the key that created it. The console uses it.
type Finder interface {
	FindIntent(ctx context.Context, id string) (server.FoundIntent, error)
}

// testFindKeepsKey: a create run under an idempotency key, transactional
// or durable, keeps the key with its intent (once.KeyFrom). FindIntent
// returns it with the owner, and a cancel keeps it. An intent created
// without a key has none.
func testFindKeepsKey(t *testing.T, open Opener) {
	b := newBackend(t, open)
	f, ok := b.Intents.(Finder)
	if !ok {
		t.Skip("the intent store cannot find an intent by its id")
	}
	g, err := once.New(b.Records, once.Options{Lease: lease, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(b.Intents, testclock.New().Now)
	ctx := auth.NewContext(context.Background(), "alice")
	req := createRequest()
	find := func(id string) server.FoundIntent {
		t.Helper()
		found, err := f.FindIntent(context.Background(), id)
		if err != nil {
			t.Fatalf("FindIntent(%s): %v", id, err)
		}
		return found
	}
	for _, transactional := range []bool{true, false} {
		key := "order-1-durable"
		if transactional {
			key = "order-1-transactional"
		}
		resp, _, err := once.Do(ctx, g, once.Request{Scope: "alice", Key: key, Operation: "/test/Create", Message: req, Transactional: transactional},
			func(ctx context.Context) (*paymentsv1.CreatePaymentIntentResponse, error) {
				return srv.CreatePaymentIntent(ctx, req)
			})
		if err != nil {
			t.Fatalf("create under key %s: %v", key, err)
		}
		id := resp.PaymentIntent.Id
		if found := find(id); found.Owner != "alice" || found.Key != key || found.Intent.GetId() != id {
			t.Errorf("FindIntent of an intent created under %s = owner %q key %q intent %v; want alice, %s, the intent", key, found.Owner, found.Key, found.Intent, key)
		}
		if _, err := srv.CancelPaymentIntent(ctx, &paymentsv1.CancelPaymentIntentRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		if found := find(id); found.Key != key || found.Intent.GetState() != paymentsv1.State_STATE_CANCELED {
			t.Errorf("FindIntent after a cancel = key %q state %v; want %s, canceled", found.Key, found.Intent.GetState(), key)
		}
	}
	resp, err := srv.CreatePaymentIntent(ctx, req) // no Guard: no key
	if err != nil {
		t.Fatal(err)
	}
	if found := find(resp.PaymentIntent.Id); found.Owner != "alice" || found.Key != "" {
		t.Errorf("FindIntent of an intent created without a key = owner %q key %q; want alice and no key", found.Owner, found.Key)
	}
}
