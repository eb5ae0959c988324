package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"
)

// gate is an IntentStore whose creates can be held or failed.
type gate struct {
	server.IntentStore
	entered chan struct{} // with hold: told of a create that waits
	hold    chan struct{} // when not nil, a create waits for it to close
	fail    error
}

func (g *gate) CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error {
	if g.hold != nil {
		g.entered <- struct{}{}
		<-g.hold
	}
	if g.fail != nil {
		return g.fail
	}
	return g.IntentStore.CreateIntent(ctx, owner, key, pi)
}

// newCreator is a creator on a fresh bbolt file, its creates through g.
func newCreator(t *testing.T) (*creator, *gate, *boltintents.Backend) {
	t.Helper()
	db, err := boltintents.Open(context.Background(), t.TempDir()+"/t.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	guard, err := once.New(db.Records(), once.Options{NotStored: notStored, Statuses: interceptor.StatusErrors})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{IntentStore: db.Intents()}
	return &creator{guard: guard, server: server.New(g, nil), retry: time.Second, log: slog.New(slog.DiscardHandler)}, g, db
}

// cmdOf is a command of key for amount.
func cmdOf(t *testing.T, key string, amount int) command {
	t.Helper()
	req := &paymentsv1.CreatePaymentIntentRequest{}
	if err := protojson.Unmarshal(body(amount), req); err != nil {
		t.Fatal(err)
	}
	return command{key: key, req: req}
}

func reasonOf(o outcome) string {
	for _, d := range o.status.GetDetails() {
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) == nil {
			return info.Reason
		}
	}
	return ""
}

// A create runs once; its duplicate is a replay, its reuse a refusal.
func TestCreate_FreshThenReplayThenMismatch(t *testing.T) {
	c, _, _ := newCreator(t)
	ctx := context.Background()
	first := c.create(ctx, "alice", cmdOf(t, "k1", 5))
	if first.resp == nil || first.replayed || first.retry != 0 {
		t.Fatalf("first: %+v", first)
	}
	again := c.create(ctx, "alice", cmdOf(t, "k1", 5))
	if !again.replayed || !proto.Equal(again.resp, first.resp) {
		t.Errorf("duplicate: %+v, want a replay of %v", again, first.resp)
	}
	reused := c.create(ctx, "alice", cmdOf(t, "k1", 6))
	if reused.status.GetCode() != int32(code.Code_FAILED_PRECONDITION) || reasonOf(reused) != wire.ReasonKeyReused || reused.replayed || reused.retry != 0 {
		t.Errorf("reuse: %+v", reused)
	}
	if other := c.create(ctx, "bob", cmdOf(t, "k1", 6)); other.resp == nil || other.replayed {
		t.Errorf("the same key of another principal: %+v", other)
	}
}

// A refused body is stored: its duplicate is that refusal, replayed.
func TestCreate_StoredErrorReplayed(t *testing.T) {
	c, _, _ := newCreator(t)
	bad := cmdOf(t, "k1", 5)
	bad.req.Amount = "0"
	first := c.create(context.Background(), "alice", bad)
	again := c.create(context.Background(), "alice", bad)
	if first.status.GetCode() != int32(code.Code_INVALID_ARGUMENT) || first.replayed {
		t.Errorf("first: %+v", first)
	}
	if !again.replayed || !proto.Equal(again.status, first.status) {
		t.Errorf("duplicate: %+v, want a replay of %v", again, first.status)
	}
}

// A duplicate of a create in flight is left to a redelivery.
func TestCreate_InFlightIsRetried(t *testing.T) {
	c, g, _ := newCreator(t)
	g.entered, g.hold = make(chan struct{}, 1), make(chan struct{})
	done := make(chan outcome)
	go func() { done <- c.create(context.Background(), "alice", cmdOf(t, "k1", 5)) }()
	<-g.entered // the first holds its claim
	dup := c.create(context.Background(), "alice", cmdOf(t, "k1", 5))
	close(g.hold)
	if dup.retry <= 0 || dup.status != nil {
		t.Errorf("duplicate in flight: %+v, want a retry", dup)
	}
	if first := <-done; first.resp == nil {
		t.Errorf("first: %+v", first)
	}
}

// A failed intent write stores nothing: the redelivery creates it.
func TestCreate_StorageFailureIsRetried(t *testing.T) {
	c, g, db := newCreator(t)
	g.fail = errors.New("disk full")
	if o := c.create(context.Background(), "alice", cmdOf(t, "k1", 5)); o.retry != c.retry {
		t.Errorf("failed write: %+v, want a retry", o)
	}
	g.fail = nil
	if o := c.create(context.Background(), "alice", cmdOf(t, "k1", 5)); o.resp == nil || o.replayed {
		t.Errorf("redelivery: %+v, want a fresh create", o)
	}
	db.Close()
	if o := c.create(context.Background(), "alice", cmdOf(t, "k2", 5)); o.retry != c.retry {
		t.Errorf("closed store: %+v, want a retry", o)
	}
}

// A create from a message keeps its key with the intent, as one over gRPC
// does (once.KeyFrom): an operator finds it by the intent's id.
func TestCreate_KeepsTheMessagesKeyWithTheIntent(t *testing.T) {
	c, _, db := newCreator(t)
	o := c.create(context.Background(), "alice", cmdOf(t, "msg-key-1", 5))
	if o.resp == nil {
		t.Fatalf("create: %+v", o)
	}
	found, err := db.Intents().(*boltintents.Store).FindIntent(context.Background(), o.resp.GetPaymentIntent().GetId())
	if err != nil || found.Owner != "alice" || found.Key != "msg-key-1" {
		t.Fatalf("FindIntent = owner %q key %q, %v; want alice, msg-key-1", found.Owner, found.Key, err)
	}
}
