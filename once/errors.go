package once

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// The kinds of Refusal. Test for one with errors.Is; every Refusal is
// exactly one of them, or the caller's own context error.
var (
	// ErrInvalidKey: the key breaks wire.ValidateKey's rule.
	ErrInvalidKey = errors.New("once: invalid idempotency key")
	// ErrInFlight: the first call with the key still runs. Retry after
	// Refusal.RetryDelay, with the same key.
	ErrInFlight = errors.New("once: idempotency key in flight")
	// ErrKeyReused: the key was used for another request.
	ErrKeyReused = errors.New("once: idempotency key reused for another request")
	// ErrSuperseded: this call's run was taken over by a newer attempt,
	// which alone stores its result.
	ErrSuperseded = errors.New("once: attempt superseded")
	// ErrWriteConflict: a transactional function lost to concurrent writes
	// each time it ran. Nothing was stored.
	ErrWriteConflict = errors.New("once: write conflict")
	// ErrOutcomeUnknown: the store failed while committing. A retry with
	// the same key learns whether the result was kept.
	ErrOutcomeUnknown = errors.New("once: outcome unknown")
	// ErrStoreUnavailable: the store failed. Retry with the same key.
	ErrStoreUnavailable = errors.New("once: store unavailable")
	// ErrDataLoss: the store found its data damaged.
	ErrDataLoss = errors.New("once: store data damaged")
	// ErrMisuse: the call itself is wrong, such as a request without a
	// message or a response that cannot be encoded. Retrying cannot help.
	ErrMisuse = errors.New("once: misuse")
)

// Refusal is the rules' answer when they neither ran the function nor
// replayed its result: the key is invalid, in flight or reused, the store
// failed, or the caller's context ended. Nothing of this call was stored.
// Its Status is what a gRPC server answers with.
type Refusal struct {
	// Status carries the code, a message for the caller and, for the
	// refusals of the rules, an ErrorInfo of domain wire.ErrorDomain.
	Status *spb.Status
	kind   error // one of the Err* above; nil for a context's error
	cause  error // the context's error, or nil
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%v: %s", code.Code(r.Status.GetCode()), r.Status.GetMessage())
}

// Unwrap returns its kind (ErrInFlight and the like) and, when the
// caller's context ended, the context's error.
func (r *Refusal) Unwrap() []error {
	var errs []error
	for _, e := range []error{r.kind, r.cause} {
		if e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// Code is the status code.
func (r *Refusal) Code() code.Code { return code.Code(r.Status.GetCode()) }

// Reason is the ErrorInfo reason of a refusal of the rules (one of wire's
// reasons), or "" for a store failure, a misuse or a context's end.
func (r *Refusal) Reason() string {
	for _, d := range r.Status.GetDetails() {
		var info errdetails.ErrorInfo
		if d.MessageIs(&info) && d.UnmarshalTo(&info) == nil && info.Domain == wire.ErrorDomain {
			return info.Reason
		}
	}
	return ""
}

// RetryDelay is the RetryInfo delay of an in-flight refusal or of a scope
// unavailable, or 0.
func (r *Refusal) RetryDelay() time.Duration {
	for _, d := range r.Status.GetDetails() {
		var info errdetails.RetryInfo
		if d.MessageIs(&info) && d.UnmarshalTo(&info) == nil {
			return info.RetryDelay.AsDuration()
		}
	}
	return 0
}

// Retryable reports whether err is a refusal that a retry with the same
// key may turn into an answer: in flight, superseded, a write conflict,
// an unknown outcome or an unavailable store.
func Retryable(err error) bool {
	for _, kind := range []error{ErrInFlight, ErrSuperseded, ErrWriteConflict, ErrOutcomeUnknown, ErrStoreUnavailable} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

// StoredError is a function's error as stored: a google.rpc.Status. Do
// returns it on the first run and on every replay alike. A function
// returns one, through Errorf, to choose its code; Options.Statuses
// stores errors of other types with their own codes.
type StoredError struct {
	Status *spb.Status
}

// Errorf returns a StoredError of code c, for a function to return.
func Errorf(c code.Code, format string, args ...any) *StoredError {
	return &StoredError{Status: &spb.Status{Code: int32(c), Message: fmt.Sprintf(format, args...)}}
}

func (e *StoredError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%v: %s", code.Code(e.Status.GetCode()), e.Status.GetMessage())
}

// Code is the status code.
func (e *StoredError) Code() code.Code { return code.Code(e.Status.GetCode()) }

// Statuses converts a function's errors of a library's own type into the
// statuses stored, and the stored statuses back into that type, so that
// their codes and details survive. interceptor.StatusErrors does so for
// gRPC status errors. Package once itself imports no gRPC.
type Statuses interface {
	// Status returns the status err is stored as. ok false leaves err to
	// the defaults: a StoredError's own status, a context's error as its
	// code, any other as UNKNOWN.
	Status(err error) (st *spb.Status, ok bool)
	// Error returns what Do answers for a stored status, first run and
	// replays alike. It must not return a *Refusal.
	Error(st *spb.Status) error
}

// statusOf is the status a function's error is stored as: what statuses
// says, a StoredError's own, a context's error as its code, any other as
// UNKNOWN.
func statusOf(err error, statuses Statuses) *spb.Status {
	if statuses != nil {
		if st, ok := statuses.Status(err); ok && st != nil {
			return st
		}
	}
	var e *StoredError
	switch {
	case errors.As(err, &e) && e != nil && e.Status != nil:
		return e.Status
	case errors.Is(err, context.DeadlineExceeded):
		return &spb.Status{Code: int32(code.Code_DEADLINE_EXCEEDED), Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &spb.Status{Code: int32(code.Code_CANCELLED), Message: err.Error()}
	}
	return &spb.Status{Code: int32(code.Code_UNKNOWN), Message: err.Error()}
}

// storedError is what Do answers for a stored status: a copy, so that the
// caller cannot change what later calls replay.
func storedError(st *spb.Status, statuses Statuses) error {
	st = proto.Clone(st).(*spb.Status)
	if statuses != nil {
		return statuses.Error(st)
	}
	return &StoredError{Status: st}
}

// maxRetryDelay caps the RetryInfo delay of an in-flight answer. Most
// handlers finish long before their lease ends. See handlerTimes.
const maxRetryDelay = time.Second

// refusal returns a Refusal of kind with an ErrorInfo of reason and any
// further details.
func refusal(kind error, c code.Code, reason, msg string, meta map[string]string, details ...proto.Message) *Refusal {
	st := &spb.Status{Code: int32(c), Message: msg}
	all := append([]proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain, Metadata: meta}}, details...)
	for _, d := range all {
		a, err := anypb.New(d)
		if err != nil {
			continue // unreachable: the details always marshal
		}
		st.Details = append(st.Details, a)
	}
	return &Refusal{Status: st, kind: kind}
}

// plain returns a Refusal of kind without details.
func plain(kind error, c code.Code, format string, args ...any) *Refusal {
	return &Refusal{Status: &spb.Status{Code: int32(c), Message: fmt.Sprintf(format, args...)}, kind: kind}
}

// misuse is a Refusal for a call that cannot work.
func misuse(format string, args ...any) *Refusal {
	return plain(ErrMisuse, code.Code_INTERNAL, "idempotency: "+format, args...)
}

// gaveUp is the Refusal for a caller whose context ended before an answer.
func gaveUp(ctxErr error) *Refusal {
	st := statusOf(ctxErr, nil)
	return &Refusal{Status: st, cause: ctxErr}
}

func errInvalidKey(err error) *Refusal {
	return refusal(ErrInvalidKey, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid, "invalid idempotency key: "+err.Error(), nil)
}

func errInFlight(key string, delay time.Duration) *Refusal {
	return refusal(ErrInFlight, code.Code_ABORTED, wire.ReasonKeyInUse,
		fmt.Sprintf("a request with idempotency key %q is still in progress; retry after %v", key, delay),
		map[string]string{"idempotency_key": key},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

// minScopeRetryDelay is the retry delay of a scope unavailable when the
// store names none, or one shorter: a retry sooner would find it the same.
const minScopeRetryDelay = 100 * time.Millisecond

// errScopeUnavailable refuses a claim its store could not take for this
// scope alone. Why the scope is away is told; the cause is not.
func errScopeUnavailable(err error) *Refusal {
	why, delay := "unavailable", time.Second
	var se *storage.ScopeUnavailableError
	if errors.As(err, &se) {
		why = se.Why
		if se.RetryAfter > 0 {
			delay = max(se.RetryAfter, minScopeRetryDelay)
		}
	}
	return refusal(ErrStoreUnavailable, code.Code_UNAVAILABLE, wire.ReasonScopeUnavailable,
		fmt.Sprintf("the caller's idempotency records are unavailable (%s), the request was not run; retry with the same key after %v", why, delay),
		map[string]string{"why": why},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

func errMismatch(key string, stored *storage.Record, got storage.Fingerprint, scheme string) *Refusal {
	meta := map[string]string{"idempotency_key": key, "stored_fingerprint": stored.Fingerprint.Short(), "request_fingerprint": got.Short()}
	msg := fmt.Sprintf("idempotency key %q was already used for a different request (fingerprint %s, got %s)",
		key, stored.Fingerprint.Short(), got.Short())
	if stored.Scheme != scheme {
		meta["stored_scheme"], meta["request_scheme"] = stored.Scheme, scheme
		msg = fmt.Sprintf("idempotency key %q was used for a request fingerprinted as %q; this server fingerprints as %q and cannot tell whether the requests are the same (fingerprint %s, got %s)",
			key, stored.Scheme, scheme, stored.Fingerprint.Short(), got.Short())
	}
	return refusal(ErrKeyReused, code.Code_FAILED_PRECONDITION, wire.ReasonKeyReused, msg, meta)
}

func errSuperseded(key string, attempt uint64) *Refusal {
	return refusal(ErrSuperseded, code.Code_ABORTED, wire.ReasonAttemptSuperseded,
		fmt.Sprintf("attempt %d for idempotency key %q was superseded by a newer attempt; its result was discarded", attempt, key),
		map[string]string{"idempotency_key": key})
}

func errWriteConflict(key string, runs int) *Refusal {
	return refusal(ErrWriteConflict, code.Code_ABORTED, wire.ReasonWriteConflict,
		fmt.Sprintf("the request with idempotency key %q ran %d times and each time other requests changed the data it changes before it could commit; nothing was stored: retry with the same key", key, runs),
		map[string]string{"idempotency_key": key})
}

func errOutcomeUnknown(key string, attempt uint64, durable bool) *Refusal {
	then := "runs the request if it was not"
	if durable {
		// The handler ran, and may have acted outside the store.
		then = "takes the request over once its lease ends, and runs it again, if it was not"
	}
	return refusal(ErrOutcomeUnknown, code.Code_UNAVAILABLE, wire.ReasonOutcomeUnknown,
		fmt.Sprintf("the store failed while committing attempt %d for idempotency key %q and cannot tell whether its result was kept: retry with the same key, never a new one; the retry answers with the result if it was kept, and %s", attempt, key, then),
		map[string]string{"idempotency_key": key})
}
