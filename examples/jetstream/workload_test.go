package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// kind is what a published command is to the test.
type kind int

const (
	original  kind = iota
	duplicate      // the same command again, under another Nats-Msg-Id
	reuse          // the same key with another body
	malformed      // no key, or a body that does not decode
)

// malformedCommands is how many malformed commands a workload sends.
const malformedCommands = 2

// ownedKey is a key in its scope.
type ownedKey struct{ principal, key string }

// sentCommand is one command the broker stored.
type sentCommand struct {
	ownedKey
	kind kind
	seq  uint64 // its sequence in the command stream
}

// workload publishes the commands: originals, duplicates of some of them
// later in the stream, and reuses of keys already answered.
type workload struct {
	originals  int
	duplicates int
	reuses     int
	pubs       map[string]jetstream.JetStream // each principal's own connection

	mu           sync.Mutex
	sent         []sentCommand
	brokerDedups int // republished with the same Nats-Msg-Id, dropped by the broker
	probes       int
}

// body is a create request of the given amount, in protojson.
func body(amount int) []byte {
	b, err := protojson.Marshal(&paymentsv1.CreatePaymentIntentRequest{
		Chain: "evm:31337", Token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:   strconv.Itoa(amount), ExpiresInSeconds: 900,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// keyOf is the i-th original's key: alice and bob take turns.
func keyOf(i int) ownedKey {
	return ownedKey{principal: []string{"alice", "bob"}[i%2], key: fmt.Sprintf("order-%04d", i)}
}

// publish publishes one command as its principal, under the message id.
func (w *workload) publish(ctx context.Context, k ownedKey, amount int, msgID string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(createPrefix + k.principal)
	m.Header.Set(keyHeader, k.key)
	m.Data = body(amount)
	return w.pubs[k.principal].PublishMsg(ctx, m, jetstream.WithMsgID(msgID))
}

func (w *workload) record(k ownedKey, kd kind, ack *jetstream.PubAck) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, sentCommand{ownedKey: k, kind: kd, seq: ack.Sequence})
}

// publishAll publishes the originals and their duplicates, in batches with
// a pause, so that consuming overlaps publishing. The first few originals
// go out twice at once with the same id, which the broker drops.
func (w *workload) publishAll(ctx context.Context, rng *rand.Rand) error {
	type event struct {
		at float64
		i  int
		kd kind
	}
	var plan []event
	for i := range w.originals {
		plan = append(plan, event{at: float64(i), i: i})
	}
	for _, i := range rng.Perm(w.originals)[:w.duplicates] {
		plan = append(plan, event{at: float64(i+1+rng.IntN(200)) + 0.5, i: i, kd: duplicate})
	}
	slices.SortFunc(plan, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	if err := w.publishMalformed(ctx); err != nil {
		return err
	}
	for n, e := range plan {
		k, id := keyOf(e.i), keyOf(e.i).key
		if e.kd == duplicate {
			id += "/again"
		}
		ack, err := w.publish(ctx, k, e.i+1, id)
		if err != nil {
			return err
		}
		w.record(k, e.kd, ack)
		if e.kd == original && e.i < 10 { // the broker's own dedup, in its window
			w.probes++
			if again, err := w.publish(ctx, k, e.i+1, id); err != nil {
				return err
			} else if again.Duplicate {
				w.brokerDedups++
			}
		}
		if n%100 == 99 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// publishMalformed publishes a command without a key, and one whose body
// does not decode. Both are refused for good.
func (w *workload) publishMalformed(ctx context.Context) error {
	k := ownedKey{principal: "alice"}
	m := nats.NewMsg(createPrefix + k.principal)
	m.Data = body(1)
	ack, err := w.pubs[k.principal].PublishMsg(ctx, m, jetstream.WithMsgID("no-key"))
	if err != nil {
		return err
	}
	w.record(k, malformed, ack)
	k.key = "bad-body"
	m = nats.NewMsg(createPrefix + k.principal)
	m.Header.Set(keyHeader, k.key)
	m.Data = []byte(`{"amount":`)
	if ack, err = w.pubs[k.principal].PublishMsg(ctx, m, jetstream.WithMsgID(k.key)); err != nil {
		return err
	}
	w.record(k, malformed, ack)
	return nil
}

// publishReuses reuses keys with another body, each once its first
// result was replied: the reuse is then surely the second request.
func (w *workload) publishReuses(ctx context.Context, rng *rand.Rand, answered func(ownedKey) bool) error {
	for _, i := range rng.Perm(w.originals / 2)[:w.reuses] {
		k := keyOf(i)
		for !answered(k) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		ack, err := w.publish(ctx, k, 1_000_000+i, k.key+"/reuse")
		if err != nil {
			return err
		}
		w.record(k, reuse, ack)
	}
	return nil
}

// commands returns what was published so far.
func (w *workload) commands() []sentCommand {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sent)
}

// total is how many commands the broker stores in all.
func (w *workload) total() int { return w.originals + w.duplicates + w.reuses + malformedCommands }

// run publishes everything in the background. Its error arrives on the
// channel when done.
func (w *workload) run(t testing.TB, ctx context.Context, seed uint64, answered func(ownedKey) bool) <-chan error {
	t.Helper()
	done := make(chan error, 2)
	go func() { done <- w.publishAll(ctx, rand.New(rand.NewPCG(seed, 1))) }()
	go func() { done <- w.publishReuses(ctx, rand.New(rand.NewPCG(seed, 2)), answered) }()
	out := make(chan error, 1)
	go func() {
		err1, err2 := <-done, <-done
		out <- errors.Join(err1, err2)
	}()
	return out
}
