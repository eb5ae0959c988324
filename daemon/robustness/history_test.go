package robustness

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// kind is what an operation asks of the service.
type kind int

const (
	opCreate kind = iota
	opGet
	opCancel
	opList
	opListRead // one intent of a list's answer, as a read of it (see expandLists)
	opRelease  // paymentsd release of a key (release_test.go)
)

func (k kind) String() string {
	return [...]string{"create", "get", "cancel", "list", "list-read", "release"}[k]
}

// op is one recorded operation: who sent what over which face, what came
// back, and when it was called and returned, in nanoseconds since the run
// began (monotonic).
type op struct {
	Client    int
	Face      string // "grpc" or "http"; "cli" for a release
	Kind      kind
	Principal int
	Key       string // create: the idempotency key
	Body      int    // create: which of the key's two bodies
	ID        string // get, cancel: the intent
	Call      int64
	Return    int64
	// Durable says the run's claims are durable (a release then refuses
	// a stored error).
	Durable bool

	// Unknown says the client cannot know whether the operation took
	// effect (a deadline, UNAVAILABLE, a cut connection): it is modelled
	// as taking effect at any moment after its call, or never.
	Unknown  bool
	Code     codes.Code
	Reason   string // the ErrorInfo reason of an error of the idempotency layer; a release's refusal
	Replayed bool
	// Stale says a create overlaps a release of its key (markStale): it
	// may be answered from the record the release cleared.
	Stale bool
	// Result is what a replay must repeat: the intent's deterministic
	// encoding for a success, the code for a stored error.
	Result  string
	Intent  *paymentsv1.PaymentIntent   // create, get, cancel: the answer's intent
	Intents []*paymentsv1.PaymentIntent // list: the page
	Partial bool                        // list: more pages follow
	Err     string                      // the error as the client saw it, for the report
}

func (o *op) String() string {
	in := ""
	switch o.Kind {
	case opCreate:
		in = fmt.Sprintf("create p%d %s body%d", o.Principal, o.Key, o.Body)
	case opGet, opCancel, opListRead:
		in = fmt.Sprintf("%s p%d %s", o.Kind, o.Principal, o.ID)
	case opList:
		in = fmt.Sprintf("list p%d", o.Principal)
	case opRelease:
		in = fmt.Sprintf("release p%d %s", o.Principal, o.Key)
	}
	return fmt.Sprintf("c%d %s %s -> %s", o.Client, o.Face, in, o.outcome())
}

// outcome describes what came back.
func (o *op) outcome() string {
	switch {
	case o.Unknown:
		return "unknown (" + o.Err + ")"
	case o.Code != codes.OK:
		s := o.Code.String()
		if o.Reason != "" {
			s += "/" + o.Reason
		}
		if o.Replayed {
			s += " replayed"
		}
		return s
	case o.Kind == opList:
		return fmt.Sprintf("%d intents", len(o.Intents))
	}
	s := describeIntent(o.Intent)
	if o.Replayed {
		s += " replayed"
	}
	return s
}

func describeIntent(pi *paymentsv1.PaymentIntent) string {
	if pi == nil {
		return "ok"
	}
	return fmt.Sprintf("%s %s v%d amount %s", pi.Id, pi.State, pi.Version, pi.Amount)
}

// history collects a run's operations from every client.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []*op
}

func newHistory() *history { return &history{start: time.Now()} }

// now is the time since the run began, from the monotonic clock.
func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(o *op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) snapshot() []*op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*op(nil), h.ops...)
}

// Each key has two bodies, which differ in amount only; the amount names
// the principal, key and body, so that an intent found in the store tells
// which key's create made it. Every fourth key's second body has amount 0,
// which the service refuses with INVALID_ARGUMENT and stores: stored errors
// are replayed too.
const amountBase = 1_000_000_000

func amountOf(principal, key, body int) string {
	if key%4 == 3 && body == 1 {
		return "0"
	}
	return strconv.Itoa((principal+1)*amountBase + key*10 + body + 1)
}

// keyOfAmount inverts amountOf for a stored intent's amount.
func keyOfAmount(amount string) (principal, key, body int, ok bool) {
	n, err := strconv.Atoi(amount)
	if err != nil || n < amountBase {
		return 0, 0, 0, false
	}
	return n/amountBase - 1, (n % amountBase) / 10, (n%10 - 1), true
}

func keyName(key int) string { return fmt.Sprintf("k%04d", key) }

func createRequest(principal, key, body int) *paymentsv1.CreatePaymentIntentRequest {
	return &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           amountOf(principal, key, body),
		ExpiresInSeconds: 900,
	}
}
