package auth

import "crypto/sha256"

// HeldKeys returns the principal and the token hash of each key k holds,
// in the order of the file, for the tests of package auth_test.
func HeldKeys(k *Keys) (principals []string, hashes [][sha256.Size]byte) {
	for _, key := range k.keys {
		principals = append(principals, key.principal)
		hashes = append(hashes, key.hash)
	}
	return principals, hashes
}
