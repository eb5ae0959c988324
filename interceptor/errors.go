package interceptor

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/wire"
)

// maxRetryDelay caps the RetryInfo delay of an in-flight answer. Most
// handlers finish long before their lease ends. See handlerTimes.
const maxRetryDelay = time.Second

// newError returns a status error with an ErrorInfo of reason and any
// further details.
func newError(code codes.Code, reason, msg string, meta map[string]string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain, Metadata: meta}
	withDetails, err := st.WithDetails(append([]protoadapt.MessageV1{info}, details...)...)
	if err != nil {
		return st.Err() // unreachable: code is never OK and the details always marshal
	}
	return withDetails.Err()
}

func errKeyMissing(method string) error {
	return newError(codes.InvalidArgument, wire.ReasonKeyMissing,
		fmt.Sprintf("%s requires an idempotency-key header", method), nil)
}

func errKeyInvalid(why string) error {
	return newError(codes.InvalidArgument, wire.ReasonKeyInvalid, "invalid idempotency-key: "+why, nil)
}

func errInFlight(key string, delay time.Duration) error {
	return newError(codes.Aborted, wire.ReasonKeyInUse,
		fmt.Sprintf("a request with idempotency key %q is still in progress; retry after %v", key, delay),
		map[string]string{"idempotency_key": key},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

func errMismatch(key string, stored *storage.Record, got storage.Fingerprint, scheme string) error {
	meta := map[string]string{"idempotency_key": key, "stored_fingerprint": stored.Fingerprint.Short(), "request_fingerprint": got.Short()}
	msg := fmt.Sprintf("idempotency key %q was already used for a different request (fingerprint %s, got %s)",
		key, stored.Fingerprint.Short(), got.Short())
	if stored.Scheme != scheme {
		meta["stored_scheme"], meta["request_scheme"] = stored.Scheme, scheme
		msg = fmt.Sprintf("idempotency key %q was used for a request fingerprinted as %q; this server fingerprints as %q and cannot tell whether the requests are the same (fingerprint %s, got %s)",
			key, stored.Scheme, scheme, stored.Fingerprint.Short(), got.Short())
	}
	return newError(codes.FailedPrecondition, wire.ReasonKeyReused, msg, meta)
}

func errSuperseded(key string, attempt uint64) error {
	return newError(codes.Aborted, wire.ReasonAttemptSuperseded,
		fmt.Sprintf("attempt %d for idempotency key %q was superseded by a newer attempt; its result was discarded", attempt, key),
		map[string]string{"idempotency_key": key})
}

func errWriteConflict(key string, runs int) error {
	return newError(codes.Aborted, wire.ReasonWriteConflict,
		fmt.Sprintf("the request with idempotency key %q ran %d times and each time other requests changed the data it changes before it could commit; nothing was stored: retry with the same key", key, runs),
		map[string]string{"idempotency_key": key})
}

func errOutcomeUnknown(key string, attempt uint64, durable bool) error {
	then := "runs the request if it was not"
	if durable {
		// The handler ran, and may have acted outside the store.
		then = "takes the request over once its lease ends, and runs it again, if it was not"
	}
	return newError(codes.Unavailable, wire.ReasonOutcomeUnknown,
		fmt.Sprintf("the store failed while committing attempt %d for idempotency key %q and cannot tell whether its result was kept: retry with the same key, never a new one; the retry answers with the result if it was kept, and %s", attempt, key, then),
		map[string]string{"idempotency_key": key})
}
