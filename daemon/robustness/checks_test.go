package robustness

import (
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// The checks here are those a sequential model cannot state: what a
// refusal needs another operation for, what a list must hold, and what
// the store holds at the end.

// expected reports whether the contract has a place for o's answer; any
// other (DATA_LOSS, a refusal of the wrong kind) is a violation by itself.
func expected(o *op) bool {
	if o.Unknown || o.Code == codes.OK {
		return true
	}
	switch o.Kind {
	case opCreate:
		return o.Code == codes.InvalidArgument && o.Result != "" ||
			o.Code == codes.FailedPrecondition && o.Reason == wire.ReasonKeyReused ||
			o.Code == codes.Aborted && (o.Reason == wire.ReasonKeyInUse || o.Reason == wire.ReasonAttemptSuperseded)
	case opRelease:
		return o.Code == codes.FailedPrecondition && o.Reason != ""
	case opCancel:
		return o.Code == codes.Aborted && (o.Reason == wire.ReasonWriteConflict || o.Reason == wire.ReasonAttemptSuperseded)
	}
	return false // get and list: NOT_FOUND is the model's to judge
}

// crossChecks returns the violations of the rules between operations.
func crossChecks(ops []*op) []string {
	var v []string
	byKey := map[string][]*op{}
	for _, o := range ops {
		if o.Kind == opCreate {
			byKey[partitionOf(o)] = append(byKey[partitionOf(o)], o)
		}
		if !expected(o) && !(o.Kind == opGet && o.Code == codes.NotFound) {
			v = append(v, "unexpected answer: "+o.String())
		}
	}
	// An in-flight refusal needs a create of the same key running at the
	// time; a mismatch needs a create of the other body begun before it
	// returned.
	for _, o := range ops {
		if o.Kind != opCreate || o.Unknown {
			continue
		}
		inUse := o.Code == codes.Aborted && o.Reason == wire.ReasonKeyInUse
		reused := o.Code == codes.FailedPrecondition && o.Reason == wire.ReasonKeyReused
		if !inUse && !reused {
			continue
		}
		found := false
		for _, p := range byKey[partitionOf(o)] {
			ret := p.Return
			if p.Unknown {
				ret = 1<<63 - 1
			}
			if p == o || p.Call > o.Return {
				continue
			}
			if inUse && ret >= o.Call || reused && p.Body != o.Body {
				found = true
				break
			}
		}
		if !found {
			v = append(v, "refused with no other create to be refused for: "+o.String())
		}
	}
	// A list shows every intent of its principal whose create was answered
	// before the list was called, and none of another principal's.
	type answered struct {
		id  string
		ret int64
	}
	created := map[int][]answered{}
	for _, o := range ops {
		if o.Kind == opCreate && o.Code == codes.OK && !o.Unknown {
			created[o.Principal] = append(created[o.Principal], answered{o.Intent.Id, o.Return})
		}
	}
	for _, o := range ops {
		if o.Kind != opList || o.Code != codes.OK {
			continue
		}
		shown := map[string]bool{}
		for _, pi := range o.Intents {
			shown[pi.Id] = true
			if p, _, _, ok := keyOfAmount(pi.Amount); !ok || p != o.Principal {
				v = append(v, fmt.Sprintf("list of p%d shows %s", o.Principal, describeIntent(pi)))
			}
		}
		if o.Partial {
			continue
		}
		for _, a := range created[o.Principal] {
			if a.ret < o.Call && !shown[a.id] {
				v = append(v, fmt.Sprintf("%s (call %d) misses %s, whose create returned at %d", o, o.Call, a.id, a.ret))
				break
			}
		}
	}
	return v
}

// orphans compares what the store holds at the end (every intent of
// every principal) with the answers: an intent no create answer named is
// an orphan, and a key with two intents ran twice. The finish phase has
// asked every key again after the faults, so that a create whose outcome
// was unknown has had its result replayed (or run) by then.
func orphans(ops []*op, stored map[int][]*paymentsv1.PaymentIntent) (orphaned, doubled []string) {
	named := map[string]bool{}
	for _, o := range ops {
		if o.Kind == opCreate && o.Code == codes.OK && !o.Unknown {
			named[o.Intent.Id] = true
		}
	}
	perKey := map[string][]string{}
	for p, intents := range stored {
		for _, pi := range intents {
			if !named[pi.Id] {
				orphaned = append(orphaned, fmt.Sprintf("p%d %s", p, describeIntent(pi)))
			}
			if kp, k, _, ok := keyOfAmount(pi.Amount); ok {
				name := fmt.Sprintf("p%d %s", kp, keyName(k))
				perKey[name] = append(perKey[name], pi.Id)
			}
		}
	}
	for k, ids := range perKey {
		if len(ids) > 1 {
			doubled = append(doubled, fmt.Sprintf("%s: %v", k, ids))
		}
	}
	sort.Strings(orphaned)
	sort.Strings(doubled)
	return orphaned, doubled
}
