package robustness

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// The model, on small histories written by hand: what it must accept and
// what it must refuse, so that a run's verdict means what it says.
func TestModel_AcceptsTheContractRefusesItsBreaches(t *testing.T) {
	created := &paymentsv1.PaymentIntent{Id: "pi_1", State: paymentsv1.State_STATE_CREATED, Version: 1, Amount: "1"}
	canceled := &paymentsv1.PaymentIntent{Id: "pi_1", State: paymentsv1.State_STATE_CANCELED, Version: 2, Amount: "1",
		CancellationReason: paymentsv1.CancellationReason_CANCELLATION_REASON_REQUESTED, CancelTime: timestamppb.Now()}
	other := &paymentsv1.PaymentIntent{Id: "pi_2", State: paymentsv1.State_STATE_CREATED, Version: 1, Amount: "1"}
	create := func(call, ret int64, body int, pi *paymentsv1.PaymentIntent, replayed bool) *op {
		return &op{Kind: opCreate, Key: "k0001", Body: body, Call: call, Return: ret, Intent: pi, Result: intentResult(pi), Replayed: replayed}
	}
	refused := func(call, ret int64, body int, code codes.Code, reason string) *op {
		return &op{Kind: opCreate, Key: "k0001", Body: body, Call: call, Return: ret, Code: code, Reason: reason}
	}
	unknown := func(call int64, o *op) *op {
		o.Call, o.Unknown, o.Code, o.Intent, o.Result = call, true, codes.Unavailable, nil, ""
		return o
	}
	read := func(k kind, call, ret int64, pi *paymentsv1.PaymentIntent) *op {
		return &op{Kind: k, ID: "pi_1", Call: call, Return: ret, Intent: pi, Result: intentResult(pi)}
	}
	// Key k0003's second body is refused with a stored INVALID_ARGUMENT;
	// a release clears it, and then the key runs fresh.
	invalid := func(call, ret int64, replayed bool) *op {
		return &op{Kind: opCreate, Key: "k0003", Body: 1, Call: call, Return: ret, Code: codes.InvalidArgument, Result: "error InvalidArgument", Replayed: replayed}
	}
	fixed := func(call, ret int64, replayed bool) *op {
		return &op{Kind: opCreate, Key: "k0003", Body: 0, Call: call, Return: ret, Intent: created, Result: intentResult(created), Replayed: replayed}
	}
	release := func(call, ret int64, code codes.Code, refusal string) *op {
		return &op{Kind: opRelease, Key: "k0003", Call: call, Return: ret, Code: code, Reason: refusal}
	}
	// The corrected request refused as another, by a replica that still
	// answers from the released record it keeps in memory.
	fixedReused := func(call, ret int64) *op {
		return &op{Kind: opCreate, Key: "k0003", Body: 0, Call: call, Return: ret, Code: codes.FailedPrecondition, Reason: wire.ReasonKeyReused}
	}
	for _, c := range []struct {
		name string
		ok   bool
		ops  []*op
	}{
		{"fresh, then replays", true, []*op{create(0, 1, 0, created, false), create(2, 3, 0, created, true), create(4, 5, 0, created, true)}},
		{"a replay of other bytes", false, []*op{create(0, 1, 0, created, false), create(2, 3, 0, other, true)}},
		{"two fresh runs of a key", false, []*op{create(0, 1, 0, created, false), create(2, 3, 0, other, false)}},
		{"a replay before any run", false, []*op{create(0, 1, 0, created, true)}},
		{"the other body refused", true, []*op{create(0, 1, 0, created, false), refused(2, 3, 1, codes.FailedPrecondition, wire.ReasonKeyReused)}},
		{"the same body refused as another", false, []*op{create(0, 1, 0, created, false), refused(2, 3, 0, codes.FailedPrecondition, wire.ReasonKeyReused)}},
		{"in flight while the first runs", true, []*op{create(0, 5, 0, created, false), refused(1, 2, 0, codes.Aborted, wire.ReasonKeyInUse)}},
		{"in flight after the result is fixed", false, []*op{create(0, 1, 0, created, false), refused(2, 3, 0, codes.Aborted, wire.ReasonKeyInUse)}},
		{"an unknown outcome, replayed later", true, []*op{unknown(0, create(0, 0, 0, nil, false)), create(2, 3, 0, created, true)}},
		{"a paused attempt superseded by a takeover's run", true, []*op{refused(0, 9, 0, codes.Aborted, wire.ReasonAttemptSuperseded), create(2, 3, 0, created, false), create(4, 5, 0, created, true)}},
		{"superseded after the result was fixed before its call", false, []*op{create(0, 1, 0, created, false), refused(2, 3, 0, codes.Aborted, wire.ReasonAttemptSuperseded)}},
		{"a paused attempt's run overwrites the takeover's", false, []*op{create(2, 3, 0, created, false), create(0, 9, 0, other, false), create(10, 11, 0, other, true)}},
		{"an unknown outcome that never took effect", true, []*op{unknown(0, create(0, 0, 0, nil, false)), create(2, 3, 0, created, false)}},
		{"created, canceled, read canceled", true, []*op{read(opGet, 0, 1, created), read(opCancel, 2, 3, canceled), read(opGet, 4, 5, canceled)}},
		{"a read misses a completed cancel", false, []*op{read(opCancel, 0, 1, canceled), read(opGet, 2, 3, created)}},
		{"canceled, then created again", false, []*op{read(opListRead, 0, 1, canceled), read(opGet, 2, 3, created)}},
		{"a read concurrent with a cancel", true, []*op{read(opCancel, 0, 4, canceled), read(opGet, 1, 2, created)}},
		{"an unknown cancel seen later", true, []*op{unknown(0, read(opCancel, 0, 0, canceled)), read(opGet, 2, 3, canceled)}},
		{"a stored error released, then the corrected request runs fresh", true, []*op{invalid(0, 1, false), release(2, 3, codes.OK, ""), fixed(4, 5, false), fixed(6, 7, true)}},
		{"the corrected request before the release", false, []*op{invalid(0, 1, false), fixed(2, 3, false), release(4, 5, codes.OK, "")}},
		{"a replay of a released error", false, []*op{invalid(0, 1, false), release(2, 3, codes.OK, ""), invalid(4, 5, true)}},
		{"a success released", false, []*op{fixed(0, 1, false), release(2, 3, codes.OK, "")}},
		{"a success refused as one", true, []*op{fixed(0, 1, false), release(2, 3, codes.FailedPrecondition, "success"), fixed(4, 5, true)}},
		{"a stored error refused as a success", false, []*op{invalid(0, 1, false), release(2, 3, codes.FailedPrecondition, "success")}},
		{"no record refused", true, []*op{release(0, 1, codes.FailedPrecondition, "no_record"), invalid(2, 3, false)}},
		{"a release with an unknown outcome", true, []*op{invalid(0, 1, false), unknown(2, release(2, 0, codes.OK, "")), fixed(4, 5, false)}},
		// PostgreSQL: a replica answers from memory for up to 1s after the
		// release's delete, which returns only after that (seed
		// 1796168393701859654: the corrected create ran fresh on one
		// replica, then was refused as another by a second).
		{"the corrected request refused against the released record while the release runs", true,
			[]*op{invalid(0, 1, false), release(10, 50, codes.OK, ""), fixed(20, 21, false), fixedReused(22, 23), fixed(60, 61, true)}},
		{"the released error replayed while the release runs, after the fresh run", true,
			[]*op{invalid(0, 1, false), release(10, 50, codes.OK, ""), fixed(20, 21, false), invalid(22, 23, true), fixed(60, 61, true)}},
		{"the corrected request refused against the released record after the release returned", false,
			[]*op{invalid(0, 1, false), release(10, 50, codes.OK, ""), fixed(20, 21, false), fixedReused(52, 53)}},
		{"the released error replayed after the release returned", false,
			[]*op{invalid(0, 1, false), release(10, 50, codes.OK, ""), fixed(20, 21, false), invalid(52, 53, true)}},
		{"refused against the released record during an unknown release", true,
			[]*op{invalid(0, 1, false), unknown(10, release(10, 0, codes.OK, "")), fixed(20, 21, false), fixedReused(22, 23)}},
		{"a stale answer while a release that released nothing runs", false,
			[]*op{fixed(0, 1, false), release(10, 50, codes.FailedPrecondition, "success"), fixedReused(22, 23)}},
		{"not found after an answer named it", false, []*op{{Kind: opGet, ID: "pi_1", Call: 0, Return: 1, Code: codes.NotFound}}},
	} {
		var h []porcupine.Operation
		markStale(c.ops)
		for _, o := range c.ops {
			h = append(h, operation(o))
		}
		if got := porcupine.CheckOperations(model, h); got != c.ok {
			t.Errorf("%s: linearizable %t, want %t", c.name, got, c.ok)
		}
	}
}
