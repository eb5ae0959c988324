package robustness

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// The intents of the model's histories written by hand.
var (
	hCreated  = &paymentsv1.PaymentIntent{Id: "pi_1", State: paymentsv1.State_STATE_CREATED, Version: 1, Amount: "1"}
	hCanceled = &paymentsv1.PaymentIntent{Id: "pi_1", State: paymentsv1.State_STATE_CANCELED, Version: 2, Amount: "1",
		CancellationReason: paymentsv1.CancellationReason_CANCELLATION_REASON_REQUESTED, CancelTime: timestamppb.Now()}
	hOther = &paymentsv1.PaymentIntent{Id: "pi_2", State: paymentsv1.State_STATE_CREATED, Version: 1, Amount: "1"}
)

// The operations of those histories, on keys k0001 and k0003.

func hCreate(call, ret int64, body int, pi *paymentsv1.PaymentIntent, replayed bool) *op {
	return &op{Kind: opCreate, Key: "k0001", Body: body, Call: call, Return: ret, Intent: pi, Result: intentResult(pi), Replayed: replayed}
}

func hRefused(call, ret int64, body int, code codes.Code, reason string) *op {
	return &op{Kind: opCreate, Key: "k0001", Body: body, Call: call, Return: ret, Code: code, Reason: reason}
}

func hUnknown(call int64, o *op) *op {
	o.Call, o.Unknown, o.Code, o.Intent, o.Result = call, true, codes.Unavailable, nil, ""
	return o
}

func hRead(k kind, call, ret int64, pi *paymentsv1.PaymentIntent) *op {
	return &op{Kind: k, ID: "pi_1", Call: call, Return: ret, Intent: pi, Result: intentResult(pi)}
}

// Key k0003's second body is refused with a stored INVALID_ARGUMENT; a
// release clears it, and then the key runs fresh.

func hInvalid(call, ret int64, replayed bool) *op {
	return &op{Kind: opCreate, Key: "k0003", Body: 1, Call: call, Return: ret, Code: codes.InvalidArgument, Result: "error InvalidArgument", Replayed: replayed}
}

func hFixed(call, ret int64, replayed bool) *op {
	return &op{Kind: opCreate, Key: "k0003", Body: 0, Call: call, Return: ret, Intent: hCreated, Result: intentResult(hCreated), Replayed: replayed}
}

func hRelease(call, ret int64, code codes.Code, refusal string) *op {
	return &op{Kind: opRelease, Key: "k0003", Call: call, Return: ret, Code: code, Reason: refusal}
}

// hFixedReused is the corrected request refused as another, by a replica
// that still answers from the released record it keeps in memory.
func hFixedReused(call, ret int64) *op {
	return &op{Kind: opCreate, Key: "k0003", Body: 0, Call: call, Return: ret, Code: codes.FailedPrecondition, Reason: wire.ReasonKeyReused}
}

// modelCases are small histories written by hand, and whether each is
// linearizable.
var modelCases = []struct {
	name string
	ok   bool
	ops  []*op
}{
	{"fresh, then replays", true, []*op{hCreate(0, 1, 0, hCreated, false), hCreate(2, 3, 0, hCreated, true), hCreate(4, 5, 0, hCreated, true)}},
	{"a replay of other bytes", false, []*op{hCreate(0, 1, 0, hCreated, false), hCreate(2, 3, 0, hOther, true)}},
	{"two fresh runs of a key", false, []*op{hCreate(0, 1, 0, hCreated, false), hCreate(2, 3, 0, hOther, false)}},
	{"a replay before any run", false, []*op{hCreate(0, 1, 0, hCreated, true)}},
	{"the other body refused", true, []*op{hCreate(0, 1, 0, hCreated, false), hRefused(2, 3, 1, codes.FailedPrecondition, wire.ReasonKeyReused)}},
	{"the same body refused as another", false, []*op{hCreate(0, 1, 0, hCreated, false), hRefused(2, 3, 0, codes.FailedPrecondition, wire.ReasonKeyReused)}},
	{"in flight while the first runs", true, []*op{hCreate(0, 5, 0, hCreated, false), hRefused(1, 2, 0, codes.Aborted, wire.ReasonKeyInUse)}},
	{"in flight after the result is fixed", false, []*op{hCreate(0, 1, 0, hCreated, false), hRefused(2, 3, 0, codes.Aborted, wire.ReasonKeyInUse)}},
	{"an unknown outcome, replayed later", true, []*op{hUnknown(0, hCreate(0, 0, 0, nil, false)), hCreate(2, 3, 0, hCreated, true)}},
	{"a paused attempt superseded by a takeover's run", true, []*op{hRefused(0, 9, 0, codes.Aborted, wire.ReasonAttemptSuperseded), hCreate(2, 3, 0, hCreated, false), hCreate(4, 5, 0, hCreated, true)}},
	{"superseded after the result was fixed before its call", false, []*op{hCreate(0, 1, 0, hCreated, false), hRefused(2, 3, 0, codes.Aborted, wire.ReasonAttemptSuperseded)}},
	{"a paused attempt's run overwrites the takeover's", false, []*op{hCreate(2, 3, 0, hCreated, false), hCreate(0, 9, 0, hOther, false), hCreate(10, 11, 0, hOther, true)}},
	{"an unknown outcome that never took effect", true, []*op{hUnknown(0, hCreate(0, 0, 0, nil, false)), hCreate(2, 3, 0, hCreated, false)}},
	{"hCreated, canceled, read canceled", true, []*op{hRead(opGet, 0, 1, hCreated), hRead(opCancel, 2, 3, hCanceled), hRead(opGet, 4, 5, hCanceled)}},
	{"a read misses a completed cancel", false, []*op{hRead(opCancel, 0, 1, hCanceled), hRead(opGet, 2, 3, hCreated)}},
	{"canceled, then created again", false, []*op{hRead(opListRead, 0, 1, hCanceled), hRead(opGet, 2, 3, hCreated)}},
	{"a read concurrent with a cancel", true, []*op{hRead(opCancel, 0, 4, hCanceled), hRead(opGet, 1, 2, hCreated)}},
	{"an unknown cancel seen later", true, []*op{hUnknown(0, hRead(opCancel, 0, 0, hCanceled)), hRead(opGet, 2, 3, hCanceled)}},
	{"a stored error released, then the corrected request runs fresh", true, []*op{hInvalid(0, 1, false), hRelease(2, 3, codes.OK, ""), hFixed(4, 5, false), hFixed(6, 7, true)}},
	{"the corrected request before the release", false, []*op{hInvalid(0, 1, false), hFixed(2, 3, false), hRelease(4, 5, codes.OK, "")}},
	{"a replay of a released error", false, []*op{hInvalid(0, 1, false), hRelease(2, 3, codes.OK, ""), hInvalid(4, 5, true)}},
	{"a success released", false, []*op{hFixed(0, 1, false), hRelease(2, 3, codes.OK, "")}},
	{"a success refused as one", true, []*op{hFixed(0, 1, false), hRelease(2, 3, codes.FailedPrecondition, "success"), hFixed(4, 5, true)}},
	{"a stored error refused as a success", false, []*op{hInvalid(0, 1, false), hRelease(2, 3, codes.FailedPrecondition, "success")}},
	{"no record refused", true, []*op{hRelease(0, 1, codes.FailedPrecondition, "no_record"), hInvalid(2, 3, false)}},
	{"a release with an unknown outcome", true, []*op{hInvalid(0, 1, false), hUnknown(2, hRelease(2, 0, codes.OK, "")), hFixed(4, 5, false)}},
	// PostgreSQL: a replica answers from memory for up to 1s after the
	// release's delete, which returns only after that (seed
	// 1796168393701859654: the corrected create ran fresh on one
	// replica, then was refused as another by a second).
	{"the corrected request refused against the released record while the release runs", true,
		[]*op{hInvalid(0, 1, false), hRelease(10, 50, codes.OK, ""), hFixed(20, 21, false), hFixedReused(22, 23), hFixed(60, 61, true)}},
	{"the released error replayed while the release runs, after the fresh run", true,
		[]*op{hInvalid(0, 1, false), hRelease(10, 50, codes.OK, ""), hFixed(20, 21, false), hInvalid(22, 23, true), hFixed(60, 61, true)}},
	{"the corrected request refused against the released record after the release returned", false,
		[]*op{hInvalid(0, 1, false), hRelease(10, 50, codes.OK, ""), hFixed(20, 21, false), hFixedReused(52, 53)}},
	{"the released error replayed after the release returned", false,
		[]*op{hInvalid(0, 1, false), hRelease(10, 50, codes.OK, ""), hFixed(20, 21, false), hInvalid(52, 53, true)}},
	{"refused against the released record during an unknown release", true,
		[]*op{hInvalid(0, 1, false), hUnknown(10, hRelease(10, 0, codes.OK, "")), hFixed(20, 21, false), hFixedReused(22, 23)}},
	{"a stale answer while a release that released nothing runs", false,
		[]*op{hFixed(0, 1, false), hRelease(10, 50, codes.FailedPrecondition, "success"), hFixedReused(22, 23)}},
	{"not found after an answer named it", false, []*op{{Kind: opGet, ID: "pi_1", Call: 0, Return: 1, Code: codes.NotFound}}},
}

// The model, on small histories written by hand: what it must accept and
// what it must refuse, so that a run's verdict means what it says.
func TestModel_AcceptsTheContractRefusesItsBreaches(t *testing.T) {
	for _, c := range modelCases {
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
