package auth

import (
	"crypto/sha256"
	"encoding/hex"
)

// PrincipalHash is how logs name a principal: the first 16 hex digits of
// its SHA-256. That is enough to tell callers apart. One can also find a
// caller whose name is known (printf %s NAME | sha256sum | cut -c1-16).
// Logs thus never write the name itself. With a file of keys, the name may
// be the part of a token an operator should not spread.
func PrincipalHash(principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return hex.EncodeToString(sum[:8])
}
