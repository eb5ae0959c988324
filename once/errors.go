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

// Error is an answer that is not a response: a google.rpc.Status. It is
// either a function's error, as stored and replayed, or a refusal of the
// rules, such as a key in flight. A refusal carries an ErrorInfo of
// domain wire.ErrorDomain and one of wire's reasons.
type Error struct {
	Status *spb.Status
}

// Errorf returns an Error of code c, for a function to return.
func Errorf(c code.Code, format string, args ...any) *Error {
	return &Error{Status: &spb.Status{Code: int32(c), Message: fmt.Sprintf(format, args...)}}
}

func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%v: %s", code.Code(e.Status.GetCode()), e.Status.GetMessage())
}

// Code is the status code.
func (e *Error) Code() code.Code { return code.Code(e.Status.GetCode()) }

// Reason is the ErrorInfo reason of a refusal, or "" for another error.
func (e *Error) Reason() string {
	for _, d := range e.Status.GetDetails() {
		var info errdetails.ErrorInfo
		if d.MessageIs(&info) && d.UnmarshalTo(&info) == nil && info.Domain == wire.ErrorDomain {
			return info.Reason
		}
	}
	return ""
}

// RetryDelay is the RetryInfo delay of an in-flight refusal, or 0.
func (e *Error) RetryDelay() time.Duration {
	for _, d := range e.Status.GetDetails() {
		var info errdetails.RetryInfo
		if d.MessageIs(&info) && d.UnmarshalTo(&info) == nil {
			return info.RetryDelay.AsDuration()
		}
	}
	return 0
}

// statusOf is the status a function's error is stored as: an Error's own,
// a context's error as its code, any other as UNKNOWN.
func statusOf(err error) *spb.Status {
	var e *Error
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

// maxRetryDelay caps the RetryInfo delay of an in-flight answer. Most
// handlers finish long before their lease ends. See handlerTimes.
const maxRetryDelay = time.Second

// refusal returns an Error with an ErrorInfo of reason and any further
// details.
func refusal(c code.Code, reason, msg string, meta map[string]string, details ...proto.Message) *Error {
	st := &spb.Status{Code: int32(c), Message: msg}
	all := append([]proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain, Metadata: meta}}, details...)
	for _, d := range all {
		a, err := anypb.New(d)
		if err != nil {
			continue // unreachable: the details always marshal
		}
		st.Details = append(st.Details, a)
	}
	return &Error{Status: st}
}

func errInFlight(key string, delay time.Duration) *Error {
	return refusal(code.Code_ABORTED, wire.ReasonKeyInUse,
		fmt.Sprintf("a request with idempotency key %q is still in progress; retry after %v", key, delay),
		map[string]string{"idempotency_key": key},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

func errMismatch(key string, stored *storage.Record, got storage.Fingerprint, scheme string) *Error {
	meta := map[string]string{"idempotency_key": key, "stored_fingerprint": stored.Fingerprint.Short(), "request_fingerprint": got.Short()}
	msg := fmt.Sprintf("idempotency key %q was already used for a different request (fingerprint %s, got %s)",
		key, stored.Fingerprint.Short(), got.Short())
	if stored.Scheme != scheme {
		meta["stored_scheme"], meta["request_scheme"] = stored.Scheme, scheme
		msg = fmt.Sprintf("idempotency key %q was used for a request fingerprinted as %q; this server fingerprints as %q and cannot tell whether the requests are the same (fingerprint %s, got %s)",
			key, stored.Scheme, scheme, stored.Fingerprint.Short(), got.Short())
	}
	return refusal(code.Code_FAILED_PRECONDITION, wire.ReasonKeyReused, msg, meta)
}

func errSuperseded(key string, attempt uint64) *Error {
	return refusal(code.Code_ABORTED, wire.ReasonAttemptSuperseded,
		fmt.Sprintf("attempt %d for idempotency key %q was superseded by a newer attempt; its result was discarded", attempt, key),
		map[string]string{"idempotency_key": key})
}

func errWriteConflict(key string, runs int) *Error {
	return refusal(code.Code_ABORTED, wire.ReasonWriteConflict,
		fmt.Sprintf("the request with idempotency key %q ran %d times and each time other requests changed the data it changes before it could commit; nothing was stored: retry with the same key", key, runs),
		map[string]string{"idempotency_key": key})
}

func errOutcomeUnknown(key string, attempt uint64, durable bool) *Error {
	then := "runs the request if it was not"
	if durable {
		// The handler ran, and may have acted outside the store.
		then = "takes the request over once its lease ends, and runs it again, if it was not"
	}
	return refusal(code.Code_UNAVAILABLE, wire.ReasonOutcomeUnknown,
		fmt.Sprintf("the store failed while committing attempt %d for idempotency key %q and cannot tell whether its result was kept: retry with the same key, never a new one; the retry answers with the result if it was kept, and %s", attempt, key, then),
		map[string]string{"idempotency_key": key})
}

// plain is an Error without details.
func plain(c code.Code, format string, args ...any) *Error { return Errorf(c, format, args...) }
