package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
)

// A page token is opaque to clients: base64url of a version byte, the first
// 8 bytes of SHA-256 of the owner, and the store's cursor. The owner hash
// makes a token useless to anyone else: another principal's token is
// rejected rather than silently read as a position in the caller's list.

const pageTokenVersion = 1

func encodePageToken(owner string, cursor []byte) string {
	b := append([]byte{pageTokenVersion}, ownerTag(owner)...)
	return base64.RawURLEncoding.EncodeToString(append(b, cursor...))
}

// decodePageToken returns the cursor in token, nil for the empty token.
func decodePageToken(owner, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) <= 9 || b[0] != pageTokenVersion || !bytes.Equal(b[1:9], ownerTag(owner)) {
		var v violations
		v.add("page_token", "is not a page token of this caller's list; pass next_page_token unchanged")
		return nil, v.err()
	}
	return b[9:], nil
}

func ownerTag(owner string) []byte {
	sum := sha256.Sum256([]byte(owner))
	return sum[:8]
}
