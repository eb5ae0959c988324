package robustness

import (
	"fmt"
	"math"
	"sort"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// The model is the service as one sequential machine, split in partitions
// that porcupine checks apart:
//
//   - one per principal and idempotency key, of its creates. Its state is
//     the key's record: none, or the body that first took effect and its
//     result ("" while no answer has shown it). The first create to take
//     effect fixes the result; a later create with the same body replays
//     it (the same bytes, marked replayed); another body is refused
//     (FAILED_PRECONDITION / IDEMPOTENCY_KEY_REUSED); a duplicate while no
//     result is fixed may be refused as in flight (ABORTED). An answer not
//     marked replayed is a fresh run, allowed only on a key with no record.
//   - one per intent, of its gets, cancels and the lists that show it:
//     created (version 1) until a cancel takes effect, then canceled
//     (version 2, REQUESTED) for good, with the same bytes at every read.
//     Reads see every write that completed before they began.
//
// An operation whose outcome the client could not know has its return at
// infinity and is accepted either way: porcupine may place it anywhere
// after its call, the end included, where it changes nothing anyone saw.
//
// A release of a key deletes its record, and on PostgreSQL a replica may
// still answer from the record it keeps in memory for up to a second
// after (pgstore/cache.go, completedTrust); Release waits that long before
// it returns. So a create of the key whose call and return overlap a
// release's (op.Stale, set by markStale) may also get an answer of the
// record the last applied release cleared: a replay of its stored result,
// or a mismatch against its body, which changes nothing. Once the release
// has returned, such an answer is a violation.

// keyState is a key's record in the model; body -1 is no record. stale is
// the record the last applied release cleared (body -1: none).
type keyState struct {
	body   int
	result string
	stale  record
}

// record is a key's record: the body that took effect and its result.
type record struct {
	body   int
	result string
}

// intentState is an intent in the model: whether it is canceled, and the
// bytes each state was first read with ("" until then).
type intentState struct {
	canceled           bool
	created, canceled2 string
}

// partitionOf names o's partition.
func partitionOf(o *op) string {
	if o.Kind == opCreate || o.Kind == opRelease {
		return fmt.Sprintf("key p%d %s", o.Principal, o.Key)
	}
	return "intent " + o.ID
}

var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		var names []string
		for _, h := range history {
			n := partitionOf(h.Input.(*op))
			if _, ok := byName[n]; !ok {
				names = append(names, n)
			}
			byName[n] = append(byName[n], h)
		}
		sort.Strings(names)
		out := make([][]porcupine.Operation, len(names))
		for i, n := range names {
			out[i] = byName[n]
		}
		return out
	},
	Init: func() any { return nil }, // the first step tells which partition it is
	Step: func(state, input, _ any) (bool, any) {
		o := input.(*op)
		if o.Kind == opCreate || o.Kind == opRelease {
			s, ok := state.(keyState)
			if !ok {
				s = keyState{body: -1, stale: record{body: -1}}
			}
			if o.Kind == opRelease {
				return stepRelease(s, o)
			}
			return stepKey(s, o)
		}
		s, _ := state.(intentState)
		return stepIntent(s, o)
	},
	DescribeOperation: func(input, _ any) string {
		o := input.(*op)
		if o.Stale {
			return o.String() + " (during a release)"
		}
		return o.String()
	},
	DescribeState: func(state any) string {
		switch s := state.(type) {
		case keyState:
			if s.body < 0 {
				return "no record"
			}
			d := fmt.Sprintf("body%d, result %.16s…", s.body, s.result)
			if s.result == "" {
				d = fmt.Sprintf("body%d, result not yet seen", s.body)
			}
			if s.stale.body >= 0 {
				d += fmt.Sprintf("; released body%d", s.stale.body)
			}
			return d
		case intentState:
			if s.canceled {
				return "canceled"
			}
			return "created"
		}
		return "initial"
	},
}

func stepKey(s keyState, o *op) (bool, keyState) {
	ok, next := stepRecord(s, o)
	if !ok && o.Stale && staleAnswer(s.stale, o) {
		return true, s
	}
	return ok, next
}

// stepRecord is a create against the key's record as it is.
func stepRecord(s keyState, o *op) (bool, keyState) {
	set := func(body int, result string) keyState { // s with another record, s unchanged
		return keyState{body: body, result: result, stale: s.stale}
	}
	switch {
	case o.Unknown:
		if s.body < 0 {
			return true, set(o.Body, "")
		}
		return true, s
	case o.Result != "" && !o.Replayed: // a fresh run
		return s.body < 0, set(o.Body, o.Result)
	case o.Result != "": // a replay
		ok := s.body == o.Body && (s.result == "" || s.result == o.Result)
		return ok, set(o.Body, o.Result)
	case o.Code == codes.FailedPrecondition && o.Reason == wire.ReasonKeyReused:
		// Refused as another request: right against another body's
		// record, or while another body's create is in flight (the
		// in-flight check, outside the model, wants one).
		return s.body != o.Body, s
	case o.Code == codes.Aborted && (o.Reason == wire.ReasonKeyInUse || o.Reason == wire.ReasonAttemptSuperseded):
		return s.body < 0, s
	}
	return false, s // an answer the contract has no place for
}

// staleAnswer says whether o's answer is one of r, a record a release
// cleared: a replay of its result, or a mismatch against its body.
func staleAnswer(r record, o *op) bool {
	switch {
	case r.body < 0 || o.Unknown:
		return false
	case o.Result != "" && o.Replayed:
		return o.Body == r.body && (r.result == "" || r.result == o.Result)
	case o.Code == codes.FailedPrecondition && o.Reason == wire.ReasonKeyReused:
		return o.Body != r.body
	}
	return false
}

// markStale marks each create whose call and return overlap those of a
// release of the same key (an unknown outcome returns at infinity): it
// may be answered from the record the release cleared (see keyState).
func markStale(ops []*op) {
	type span struct{ call, ret int64 }
	releases := map[string][]span{}
	end := func(o *op) int64 {
		if o.Unknown {
			return math.MaxInt64
		}
		return o.Return
	}
	for _, o := range ops {
		if o.Kind == opRelease {
			releases[partitionOf(o)] = append(releases[partitionOf(o)], span{o.Call, end(o)})
		}
	}
	for _, o := range ops {
		if o.Kind != opCreate {
			continue
		}
		o.Stale = false
		for _, r := range releases[partitionOf(o)] {
			if o.Call <= r.ret && r.call <= end(o) {
				o.Stale = true
				break
			}
		}
	}
}

func stepIntent(s intentState, o *op) (bool, intentState) {
	switch o.Kind {
	case opCancel:
		switch {
		case o.Unknown:
			s.canceled = true
			return true, s
		case o.Code == codes.Aborted && (o.Reason == wire.ReasonWriteConflict || o.Reason == wire.ReasonAttemptSuperseded):
			// Nothing stored: a conflict, or, with a durable claim, a
			// newer attempt of the key (its writes commit with its
			// completion, guarded by the attempt, or not at all).
			return true, s
		case o.Code != codes.OK:
			return false, s
		}
		if !canceledShape(o.Intent) || s.canceled2 != "" && s.canceled2 != o.Result {
			return false, s
		}
		s.canceled, s.canceled2 = true, o.Result
		return true, s
	case opGet, opListRead:
		if o.Code != codes.OK {
			return false, s // NOT_FOUND for an intent an answer named
		}
		pi := o.Intent
		if pi.State == paymentsv1.State_STATE_CREATED {
			if s.canceled || pi.Version != 1 || s.created != "" && s.created != o.Result {
				return false, s
			}
			s.created = o.Result
			return true, s
		}
		if !s.canceled || !canceledShape(pi) || s.canceled2 != "" && s.canceled2 != o.Result {
			return false, s
		}
		s.canceled2 = o.Result
		return true, s
	}
	return false, s
}

// canceledShape: a canceled intent is version 2, canceled by request,
// with its cancel time.
func canceledShape(pi *paymentsv1.PaymentIntent) bool {
	return pi.State == paymentsv1.State_STATE_CANCELED && pi.Version == 2 &&
		pi.CancellationReason == paymentsv1.CancellationReason_CANCELLATION_REASON_REQUESTED && pi.CancelTime != nil
}

// porcupineHistory turns the recorded operations into porcupine's: reads
// that failed are left out (they changed nothing and showed nothing), a
// list becomes one read per intent it showed, and an operation with an
// unknown outcome returns at infinity (after every other).
//
// Of the unknown outcomes of one partition with the same input (a pause
// times out dozens of creates of one key and body) only the earliest
// called is kept: any linearization that uses a later one's effect can
// use the earliest's at the same point instead, and each of them may stay
// without effect at the end. Kept all, they make porcupine's search
// exponential in their number. Creates that overlap a release are marked
// first (markStale).
func porcupineHistory(ops []*op) []porcupine.Operation {
	markStale(ops)
	earliest := map[string]*op{}
	for _, o := range ops {
		if !o.Unknown {
			continue
		}
		g := fmt.Sprintf("%s %s %d", partitionOf(o), o.Kind, o.Body)
		if e, ok := earliest[g]; !ok || o.Call < e.Call {
			earliest[g] = o
		}
	}
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Unknown && earliest[fmt.Sprintf("%s %s %d", partitionOf(o), o.Kind, o.Body)] != o {
			continue
		}
		switch {
		case o.Kind == opList:
			if o.Code != codes.OK {
				continue
			}
			for _, pi := range o.Intents {
				r := &op{Client: o.Client, Face: o.Face, Kind: opListRead, Principal: o.Principal, ID: pi.Id,
					Call: o.Call, Return: o.Return, Intent: pi, Result: intentResult(pi)}
				out = append(out, operation(r))
			}
		case o.Kind == opGet && o.Code != codes.OK && o.Code != codes.NotFound:
			continue
		default:
			out = append(out, operation(o))
		}
	}
	return out
}

func operation(o *op) porcupine.Operation {
	ret := o.Return
	if o.Unknown {
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: ret}
}
