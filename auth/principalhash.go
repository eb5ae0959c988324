package auth

import (
	"crypto/sha256"
	"encoding/hex"
)

// PrincipalHash is how logs name a principal: the first 16 hex digits of
// its SHA-256, enough to tell callers apart and to find one whose name is
// known (printf %s NAME | sha256sum | cut -c1-16), without writing the
// name, which with a file of keys may be the part of a token an operator
// should not spread.
func PrincipalHash(principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return hex.EncodeToString(sum[:8])
}
