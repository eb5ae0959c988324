package interceptor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/internal/bearer"
	"github.com/paymentsd/paymentsd/wire"
)

// keyFromContext returns the request's idempotency key and whether one was
// sent. The error is a status error ready to return.
func keyFromContext(ctx context.Context) (string, bool, error) {
	if len(metadata.ValueFromIncomingContext(ctx, wire.KeyHeader+"-bin")) > 0 {
		return "", true, errKeyInvalid("send it as idempotency-key, not idempotency-key-bin")
	}
	vals := metadata.ValueFromIncomingContext(ctx, wire.KeyHeader)
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, errKeyInvalid(fmt.Sprintf("sent %d times; send exactly one", len(vals)))
	}
	if err := wire.ValidateKey(vals[0]); err != nil {
		return "", true, errKeyInvalid(err.Error())
	}
	return vals[0], true, nil
}

// BearerToken returns the token of the request's single
// "authorization: Bearer <token>" header, or an UNAUTHENTICATED status
// error. It reads the header by the rule of package bearer.
func BearerToken(ctx context.Context) (string, error) {
	return bearer.Parse(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// BearerScope is the default ScopeFunc: the hex SHA-256 of the bearer
// token. Each credential thus has its own keys, and no token is ever
// stored.
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

// KeySent reports whether the incoming request of ctx carries an
// idempotency key header, valid or not.
func KeySent(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, wire.KeyHeader)) > 0 ||
		len(metadata.ValueFromIncomingContext(ctx, wire.KeyHeader+"-bin")) > 0
}
