package pgintents

import (
	"context"
	"errors"
	"testing"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// An owner fenced on this database (moved to another pod) is refused on
// every read and write of its intents outside a request, so that a
// replica not yet aware of the move neither answers from here nor writes
// here; another owner is served; unfenced, the owner is served again.
func TestFence_FencedOwnersIntentsRefused(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{})
	defer db.Close()
	ctx := context.Background()
	create(t, s, "moving", intent("pi_moving", t0))
	create(t, s, "staying", intent("pi_staying", t0))
	if err := db.Fence(ctx, "moving", "to pod b"); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrScopeUnavailable) {
			t.Errorf("%s of a fenced owner: %v; want ErrScopeUnavailable", what, err)
		}
	}
	_, err := s.GetIntent(ctx, "moving", "pi_moving")
	refused("GetIntent", err)
	_, err = s.GetIntent(ctx, "moving", "pi_absent")
	refused("GetIntent of an absent id", err)
	_, _, err = s.ListIntents(ctx, "moving", nil, 10)
	refused("ListIntents", err)
	_, err = s.UpdateIntent(ctx, "moving", "pi_moving", func(*paymentsv1.PaymentIntent) bool { return true })
	refused("UpdateIntent", err)
	refused("CreateIntent", s.CreateIntent(ctx, "moving", "", intent("pi_new", t0)))
	refused("ScanIntents", s.ScanIntents(ctx, "moving", t0.Add(-1), server.Position{}, func(server.FoundIntent) (bool, error) { return true, nil }))
	if _, err := s.GetIntent(ctx, "staying", "pi_staying"); err != nil {
		t.Errorf("another owner's intent: %v", err)
	}
	if err := db.Unfence(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetIntent(ctx, "moving", "pi_moving"); err != nil {
		t.Errorf("after Unfence: %v", err)
	}
}
