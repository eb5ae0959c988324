package interceptor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Fingerprint identifies a request: SHA-256 over the full method name, a NUL
// byte, and the request's deterministic protobuf encoding. Two requests that
// differ only in the order of fields on the wire have the same fingerprint.
// Deterministic encoding is stable for one binary and schema; see doc.go.
type Fingerprint [sha256.Size]byte

// NewFingerprint computes the fingerprint of req sent to fullMethod.
func NewFingerprint(fullMethod string, req proto.Message) (Fingerprint, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(fullMethod))
	h.Write([]byte{0})
	h.Write(b)
	var fp Fingerprint
	h.Sum(fp[:0])
	return fp, nil
}

// Short is the first 8 bytes in hex, enough to tell fingerprints apart in an
// error message.
func (fp Fingerprint) Short() string { return hex.EncodeToString(fp[:8]) }

func (fp Fingerprint) String() string { return hex.EncodeToString(fp[:]) }
