package main

import (
	"context"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
)

// The broker binds a command's subject to its publisher: alice's command
// for bob is refused, and never reaches the stream.
func TestBroker_BindsTheSubjectToItsPublisher(t *testing.T) {
	b := natstest.Start(t, t.TempDir())
	_, admin := b.Connect(natstest.Admin)
	b.SetUp(admin, "creator")
	_, alice := b.Connect("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := alice.Publish(short, createPrefix+"bob", body(1)); err == nil {
		t.Error("alice published a command as bob")
	}
	if _, err := alice.Publish(ctx, createPrefix+"alice", body(1)); err != nil {
		t.Fatalf("alice's own command: %v", err)
	}
	s, err := admin.Stream(ctx, natstest.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the stream holds %d commands; want alice's one", info.State.Msgs)
	}
}
