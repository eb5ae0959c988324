package main

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// figures are what verify counted.
type figures struct {
	intents  int
	replayed int
}

// verify checks the replies and the store against what was published. A
// key has one intent, and every command of its body the same reply. A
// reuse is refused, and no claim is left in flight.
func verify(t *testing.T, w *workload, got *replies, db intents.Backend) figures {
	t.Helper()
	got.mu.Lock() // the consumers have stopped: nothing more comes
	defer got.mu.Unlock()
	var f figures
	first := map[ownedKey]*paymentsv1.CreatePaymentIntentResponse{}
	fresh := map[ownedKey]int{}
	for _, c := range w.commands() {
		for _, r := range got.bySeq[c.seq] {
			if r.ownedKey != c.ownedKey {
				t.Fatalf("command %d of %v answered for %v", c.seq, c.ownedKey, r.ownedKey)
			}
			if r.replayed {
				f.replayed++
			}
			switch c.kind {
			case reuse:
				checkReused(t, c, r)
				continue
			case malformed:
				if r.code != "INVALID_ARGUMENT" || r.replayed {
					t.Errorf("malformed command %d of %v: %s %s", c.seq, c.ownedKey, r.code, r.body)
				}
				continue
			}
			checkSame(t, c, r, first)
			if !r.replayed {
				fresh[c.ownedKey]++
			}
		}
	}
	for k, n := range fresh {
		if n > 1 {
			t.Errorf("%v: %d replies not marked replayed: the create ran more than once", k, n)
		}
	}
	f.intents = checkStore(t, db, first)
	return f
}

// checkSame checks that r answers c with the key's first result.
func checkSame(t *testing.T, c sentCommand, r gotReply, first map[ownedKey]*paymentsv1.CreatePaymentIntentResponse) {
	t.Helper()
	if r.code != "OK" {
		t.Errorf("command %d of %v: %s %s", c.seq, c.ownedKey, r.code, r.body)
		return
	}
	resp := &paymentsv1.CreatePaymentIntentResponse{}
	if err := protojson.Unmarshal(r.body, resp); err != nil {
		t.Fatalf("command %d: reply %s: %v", c.seq, r.body, err)
	}
	if was, ok := first[c.ownedKey]; !ok {
		first[c.ownedKey] = resp
	} else if !proto.Equal(was, resp) {
		t.Errorf("%v: answered %v, then %v", c.ownedKey, was, resp)
	}
}

// checkReused checks that r refuses the reuse c as a mismatch.
func checkReused(t *testing.T, c sentCommand, r gotReply) {
	t.Helper()
	st := &spb.Status{}
	if err := protojson.Unmarshal(r.body, st); err != nil || r.code != "FAILED_PRECONDITION" {
		t.Errorf("reuse %d of %v: %s %s (%v)", c.seq, c.ownedKey, r.code, r.body, err)
		return
	}
	for _, d := range st.Details {
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) == nil && info.Reason == wire.ReasonKeyReused {
			return
		}
	}
	t.Errorf("reuse %d of %v: no reason %s in %s", c.seq, c.ownedKey, wire.ReasonKeyReused, r.body)
}

// checkStore checks that the store holds the intents replied, one per key,
// each of its first body, and no claim in flight. It returns their count.
func checkStore(t *testing.T, db intents.Backend, first map[ownedKey]*paymentsv1.CreatePaymentIntentResponse) int {
	t.Helper()
	ctx := context.Background()
	want := map[string]string{} // intent id to its key's amount
	for k, resp := range first {
		i, _ := strconv.Atoi(k.key[len("order-"):])
		want[resp.PaymentIntent.Id] = strconv.Itoa(i + 1)
	}
	if len(want) != originals || len(first) != originals {
		t.Errorf("%d keys answered with %d intent ids; want %d of each", len(first), len(want), originals)
	}
	n := 0
	for _, owner := range []string{"alice", "bob"} {
		var after []byte
		for {
			page, next, err := db.Intents().ListIntents(ctx, owner, after, 500)
			if err != nil {
				t.Fatal(err)
			}
			for _, pi := range page {
				n++
				if amount, ok := want[pi.Id]; !ok || amount != pi.Amount {
					t.Errorf("intent %s of %s for %s: replied for %q", pi.Id, owner, pi.Amount, amount)
				}
			}
			if after = next; next == nil {
				break
			}
		}
	}
	if n != originals {
		t.Errorf("%d intents stored for %d keys", n, originals)
	}
	orphans, err := db.Records().InFlight(ctx, storage.RecordKey{}, 10)
	if err != nil || len(orphans) != 0 {
		t.Errorf("claims in flight at the end: %d (%v)", len(orphans), err)
	}
	return n
}
