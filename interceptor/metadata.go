package interceptor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/bearer"
)

// Metadata keys the interceptor reads and writes.
const (
	// KeyHeader carries the idempotency key on requests.
	KeyHeader = "idempotency-key"
	// ReplayedHeader is set to "true" on every replayed response.
	ReplayedHeader = "idempotent-replayed"
	// ExpiresAtHeader is set on every answer about a record, replays and
	// errors included, to when the record is forgotten (RFC 3339, UTC):
	// until then a retry with the same key is safe.
	ExpiresAtHeader = "idempotency-expires-at"
	// MaxKeyLength is the longest idempotency key accepted.
	MaxKeyLength = 255
)

// ValidateKey checks an idempotency key, which it leaves as it is: 1 to
// MaxKeyLength printable ASCII characters (0x20 to 0x7E), the first not a
// double quote and neither the first nor the last a space. Over HTTP, a header value that starts with a
// quote is a quoted string ("order-1" is the key order-1, as the IETF draft
// has it), and spaces around a value are dropped; gRPC keeps both. A key
// that started with a quote, or started or ended with a space, would be
// another key over HTTP than over gRPC, and a client that changed route
// would run its request twice. The error says what is wrong, for the
// caller.
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

// keySent reports whether the request carries an idempotency key header,
// valid or not.
func keySent(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, KeyHeader)) > 0 ||
		len(metadata.ValueFromIncomingContext(ctx, KeyHeader+"-bin")) > 0
}

// keyFromContext returns the request's idempotency key and whether one was
// sent; the error is a status error ready to return.
func keyFromContext(ctx context.Context) (string, bool, error) {
	if len(metadata.ValueFromIncomingContext(ctx, KeyHeader+"-bin")) > 0 {
		return "", true, errKeyInvalid("send it as idempotency-key, not idempotency-key-bin")
	}
	vals := metadata.ValueFromIncomingContext(ctx, KeyHeader)
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, errKeyInvalid(fmt.Sprintf("sent %d times; send exactly one", len(vals)))
	}
	if err := ValidateKey(vals[0]); err != nil {
		return "", true, errKeyInvalid(err.Error())
	}
	return vals[0], true, nil
}

// BearerToken returns the token of the request's single
// "authorization: Bearer <token>" header, read by the rule of package
// bearer, or an UNAUTHENTICATED status error.
func BearerToken(ctx context.Context) (string, error) {
	return bearer.Parse(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// BearerScope is the default ScopeFunc: the hex SHA-256 of the bearer token,
// so that each credential has its own keys and no token is ever stored.
func BearerScope(ctx context.Context) (string, error) {
	token, err := BearerToken(ctx)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(token))
	scope := make([]byte, len("sha256:")+hex.EncodedLen(len(sum)))
	hex.Encode(scope[copy(scope, "sha256:"):], sum[:])
	return string(scope), nil
}
