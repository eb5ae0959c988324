// Package wire is the idempotency contract as it travels. It holds the
// metadata names a client sends and receives, and the ErrorInfo reasons of
// the interceptor's own errors. It also holds the rule for a valid key. The
// server interceptor, the client interceptor and the HTTP face all import
// it. So each reads the same bytes the same way.
package wire

import (
	"fmt"
	"strings"
)

// Metadata keys the interceptor reads and writes.
const (
	// KeyHeader carries the idempotency key on requests.
	KeyHeader = "idempotency-key"
	// ReplayedHeader is set to "true" on every replayed response.
	ReplayedHeader = "idempotent-replayed"
	// ExpiresAtHeader is set on every answer about a record, replays and
	// errors included. It holds when the record is forgotten (RFC 3339,
	// UTC). Until then, a retry with the same key is safe.
	ExpiresAtHeader = "idempotency-expires-at"
	// MaxKeyLength is the longest idempotency key accepted.
	MaxKeyLength = 255
)

// ValidateKey checks an idempotency key, which it leaves as it is. A valid
// key is 1 to MaxKeyLength printable ASCII characters (0x20 to 0x7E). The
// first is not a double quote, and neither the first nor the last is a
// space. Over HTTP, a header value that starts with a quote is a quoted
// string, as the IETF draft has it. So "order-1" is the key order-1. Spaces
// around a value are dropped too, while gRPC keeps both. A key that started
// with a quote, or started or ended with a space, would be another key over
// HTTP than over gRPC. A client that changed route would then run its
// request twice. The error says what is wrong, for the caller.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("key is empty")
	case len(key) > MaxKeyLength:
		return fmt.Errorf("key is %d bytes long, longer than %d", len(key), MaxKeyLength)
	case key[0] == '"':
		return fmt.Errorf(`key starts with a double quote, which over HTTP delimits a key ("order-1" is the key order-1); send the key without quotes`)
	case key[0] == ' ' || key[len(key)-1] == ' ':
		return fmt.Errorf("key starts or ends with a space, which HTTP drops; send the key without it")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %d is 0x%02x; keys are printable ASCII (0x20 to 0x7e)", i, c)
		}
	}
	return nil
}

// ErrorDomain is the ErrorInfo domain of every error the interceptor itself
// returns. Errors with this domain were never stored. The client may fix
// the request and retry with the same key.
const ErrorDomain = "idempotency"

// ErrorInfo reasons of the interceptor's own errors.
const (
	// ReasonKeyMissing: INVALID_ARGUMENT, the method requires a key and none was sent.
	ReasonKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// ReasonKeyInvalid: INVALID_ARGUMENT, the key fails ValidateKey or was
	// sent more than once. For example, it is not 1..255 printable ASCII
	// characters.
	ReasonKeyInvalid = "IDEMPOTENCY_KEY_INVALID"
	// ReasonKeyInUse: ABORTED, the same request is still running; retry after
	// the RetryInfo delay.
	ReasonKeyInUse = "IDEMPOTENCY_KEY_IN_USE"
	// ReasonKeyReused: FAILED_PRECONDITION, the key was used for a different request.
	ReasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// ReasonAttemptSuperseded: ABORTED, this attempt's lease expired and a
	// newer attempt took the key over. This attempt's result was not stored.
	ReasonAttemptSuperseded = "IDEMPOTENCY_ATTEMPT_SUPERSEDED"
	// ReasonWriteConflict: ABORTED, a transactional method's writes lost to
	// other requests changing the same data, every time it ran. Nothing was
	// stored. A retry with the same key runs it afresh.
	ReasonWriteConflict = "IDEMPOTENCY_WRITE_CONFLICT"
	// ReasonOutcomeUnknown: UNAVAILABLE, the store failed while committing
	// the request's result. It cannot tell whether the result was kept.
	// Retry with the same key, never a new one, to learn which.
	ReasonOutcomeUnknown = "IDEMPOTENCY_OUTCOME_UNKNOWN"
	// ReasonScopeUnavailable: UNAVAILABLE, the caller's records cannot be
	// reached right now (their database is down, or they are being moved
	// to another), while other callers' can. Nothing was run or stored.
	// Retry with the same key after the RetryInfo delay.
	ReasonScopeUnavailable = "IDEMPOTENCY_SCOPE_UNAVAILABLE"
)

// ValidateMethod reports a name that is not a full gRPC method name,
// "/package.Service/Method", as grpc.UnaryServerInfo.FullMethod has it.
func ValidateMethod(name string) error {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !strings.HasPrefix(name, "/") || !ok || service == "" || method == "" ||
		strings.ContainsAny(method, "/ ") || strings.ContainsAny(service, " ") {
		return fmt.Errorf("method %q is not a full method name of the form /package.Service/Method", name)
	}
	return nil
}
