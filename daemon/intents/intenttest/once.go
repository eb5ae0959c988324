package intenttest

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/once"
)

// testOnceTransactional: once.Do in its transactional form writes through
// the backend's Tx. A response's intent commits with its record; an
// error's writes are discarded, and its answer alone is stored.
func testOnceTransactional(t *testing.T, open Opener) {
	b := newBackend(t, open)
	g, err := once.New(b.Records, once.Options{Lease: lease, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	create := func(key, id string, fail bool) (*paymentsv1.PaymentIntent, error) {
		req := once.Request{Scope: "alice", Key: key, Operation: "/test/Create", Message: intent(id, t0), Transactional: true}
		resp, _, err := once.Do(context.Background(), g, req, func(ctx context.Context) (*paymentsv1.PaymentIntent, error) {
			pi := intent(id, t0)
			if err := b.Intents.CreateIntent(ctx, "alice", "", pi); err != nil {
				return nil, err
			}
			if fail {
				return nil, once.Errorf(code.Code_FAILED_PRECONDITION, "refused after writing")
			}
			return pi, nil
		})
		return resp, err
	}
	if _, err := create("k1", "pi_kept", false); err != nil {
		t.Fatalf("Do: %v", err)
	}
	stored(t, b, "alice", intent("pi_kept", t0))
	for range 2 {
		_, err := create("k2", "pi_dropped", true)
		var e *once.StoredError
		if !errors.As(err, &e) || e.Code() != code.Code_FAILED_PRECONDITION {
			t.Fatalf("Do of a failing function: %v, want its FAILED_PRECONDITION, stored", err)
		}
	}
	absent(t, b, "alice", "pi_dropped")
}
