package storage

import (
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint identifies a request. It is SHA-256 over the full method
// name, a NUL byte, and the request's deterministic protobuf encoding. Two
// requests that differ only in the order of fields on the wire have the
// same fingerprint. Deterministic encoding is stable for one binary and
// schema (see the interceptor package's documentation).
type Fingerprint [sha256.Size]byte

// Short is the first 8 bytes in hex. That is enough to tell fingerprints
// apart in an error message.
func (fp Fingerprint) Short() string { return hex.EncodeToString(fp[:8]) }

func (fp Fingerprint) String() string { return hex.EncodeToString(fp[:]) }

// FingerprintScheme names how fingerprints of protobuf requests are
// computed. Records keep the scheme of their fingerprint. A fingerprint
// computed another way cannot be compared with it. A request that meets a
// record of another scheme is thus a mismatch, never a replay.
const FingerprintScheme = "sha256-deterministic-v1"
