package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// A page token is opaque to clients. It is base64url (unpadded, canonical)
// of a version byte, the store's cursor and a tag. The tag is the first 8
// bytes of SHA-256 over the owner and the cursor. It makes a token useless
// to anyone else. An edited token, down to one character appended, is
// rejected rather than read as a position in the caller's list. The tag
// has no secret key: it catches mistakes, not a caller who forges a cursor
// into their own list, which can show them only their own intents.

const pageTokenVersion = 2

const tagSize = 8

var pageTokenEncoding = base64.RawURLEncoding.Strict()

func encodePageToken(owner string, cursor []byte) string {
	b := append([]byte{pageTokenVersion}, cursor...)
	return pageTokenEncoding.EncodeToString(append(b, pageTag(owner, cursor)...))
}

// decodePageToken returns the cursor in token, nil for the empty token.
func decodePageToken(owner, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	b, err := pageTokenEncoding.DecodeString(token)
	if err == nil && len(b) > 1+tagSize && b[0] == pageTokenVersion &&
		pageTokenEncoding.EncodeToString(b) == token { // one spelling per token
		cursor, tag := b[1:len(b)-tagSize], b[len(b)-tagSize:]
		if subtle.ConstantTimeCompare(tag, pageTag(owner, cursor)) == 1 {
			return cursor, nil
		}
	}
	var v violations
	v.add("page_token", "is not a page token of this caller's list; pass next_page_token unchanged")
	return nil, v.err()
}

// pageTag binds a cursor to its owner.
func pageTag(owner string, cursor []byte) []byte {
	h := sha256.New()
	h.Write([]byte{byte(len(owner) >> 8), byte(len(owner))})
	h.Write([]byte(owner))
	h.Write(cursor)
	return h.Sum(nil)[:tagSize]
}
