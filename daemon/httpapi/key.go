package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/paymentsd/paymentsd/wire"
)

// keyHeader is the HTTP spelling of wire.KeyHeader.
const keyHeader = "Idempotency-Key"

// readKey returns the idempotency key that one Idempotency-Key header
// value names. The IETF draft (draft-ietf-httpapi-idempotency-key-header)
// makes the header a structured-field string, "order-1001", with \" and \\
// escapes (RFC 8941). Most clients send the key bare, order-1001. Both
// name the same key. A value that starts with a double quote is read as a
// string. Any other value is the key itself.
//
// A value holding a comma is refused, in either form. Yet
// wire.ValidateKey allows a comma in a key sent over gRPC. HTTP lets a
// proxy merge two header lines into one, joined by a comma. So a comma is
// ambiguous. Outside quotes, a, b is two keys (bare) or a list of two
// strings ("a", "b"). Inside quotes it is no safer. The refused line `"a`
// and the bare key `b"` merge into `"a, b"`, a well-formed string naming a
// third key. Refusing every comma makes a merged header a refusal, never a
// key that no single line named. A gRPC key holding a comma cannot be
// sent over HTTP. It is refused there, not read as another key.
func readKey(v string) (string, error) {
	if strings.Contains(v, ",") {
		return "", errors.New("it holds a comma, which HTTP uses to join header lines: send one key, with no comma")
	}
	if !strings.HasPrefix(v, `"`) {
		return v, nil
	}
	var key strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			if i++; i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`in a quoted key, a backslash may only escape " or \`)
			}
			key.WriteByte(v[i])
		case '"':
			if i != len(v)-1 {
				return "", errors.New("the quoted key is followed by more characters; send the key alone")
			}
			return key.String(), nil
		default:
			key.WriteByte(c)
		}
	}
	return "", errors.New("the quoted key has no closing double quote")
}

// decodeKeys replaces each Idempotency-Key value of h by the key it names.
// The keys are then ready to be forwarded as gRPC metadata.
// A value that names no key is an error for the caller. So is a key that
// gRPC metadata cannot carry. Metadata drops values that are not printable
// ASCII, which would turn a bad key into a missing one. The key's own
// rules are wire.ValidateKey's. How many keys were sent is the
// interceptor's to judge.
func decodeKeys(h http.Header) error {
	vals := h[keyHeader] // keyHeader is canonical; the values are edited in place
	for i, v := range vals {
		key, err := readKey(v)
		if err == nil {
			err = wire.ValidateKey(key)
		}
		if err != nil {
			return err
		}
		vals[i] = key
	}
	return nil
}

// echoKeys sets on the answer's header h each Idempotency-Key value of the
// request's header req. Each is echoed as sent, before decodeKeys reads
// it. The IETF draft's and Stripe's examples do the same. A client, or a
// log of answers alone, can then tell which key an answer belongs to, an
// error too.
func echoKeys(h, req http.Header) {
	for _, v := range req[keyHeader] {
		h.Add(keyHeader, v)
	}
}
