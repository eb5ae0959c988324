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
	opts := proto.MarshalOptions{Deterministic: true}
	b := make([]byte, 0, len(fullMethod)+1+opts.Size(req))
	b = append(append(b, fullMethod...), 0)
	b, err := opts.MarshalAppend(b, req)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint: %w", err)
	}
	return sha256.Sum256(b), nil
}

// Short is the first 8 bytes in hex, enough to tell fingerprints apart in an
// error message.
func (fp Fingerprint) Short() string { return hex.EncodeToString(fp[:8]) }

func (fp Fingerprint) String() string { return hex.EncodeToString(fp[:]) }
