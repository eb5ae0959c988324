package auth_test

import (
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/internal/bearer"
)

// FuzzParseKeys feeds ParseKeys a file whose first line is
// KeyLine(principal, token) and whose other lines are fuzzed, and a file
// whose first line is "<principal> <token>", the token itself written where
// its hash belongs. ParseKeys must not panic; what it accepts holds valid
// principals only, reads the same when written out again, and gives the
// known token its principal; what it refuses it says without the token.
func FuzzParseKeys(f *testing.F) {
	for _, seed := range parseKeysSeeds {
		f.Add(seed.principal, seed.token, []byte(seed.extra))
	}
	f.Fuzz(func(t *testing.T, principal, token string, extra []byte) {
		hashesAuthenticate(t, principal, token, extra)

		// The same file with the token written where its hash belongs.
		if tok, err := bearer.ParseToken(token); err != nil || tok != token {
			return // not a token a client could send
		}
		tokenForItsHashRefused(t, principal, token, extra)
	})
}

// parseKeysSeeds are FuzzParseKeys' seeds: the first line's principal and
// token, and the lines after it. They hold comments, blank lines, CRLF,
// hashes shared or cased or cut short, principals too long or invalid,
// and tokens that look like hashes or need quoting.
var parseKeysSeeds = []struct {
	principal, token, extra string
}{
	{"alice", "a-secret", ""},
	{"alice", "a-secret", "# team keys\n\n  bob   " + hash("b-secret") + "  \n"},
	{"alice", "a-secret", "alice " + hash("a-rotated") + "\n"},
	{"alice", "a-secret", "bob " + hash("a-secret") + "\n"},               // one hash, two principals
	{"alice", "a-secret", "bob " + strings.ToUpper(hash("b")[7:]) + "\n"}, // no sha256:
	{"alice", "a-secret", "bob sha256:" + strings.ToUpper(hash("b")[7:]) + "\n"},
	{"alice", "a-secret", "bob sha256:abcd\n"},
	{"alice", "a-secret", "al/ice " + hash("x") + "\n"},
	{"alice", "a-secret", "bob " + hash("x") + " extra\n"},
	{"alice", "a-secret", "\r\nbob\t" + hash("x") + "\r\n"},
	{"al ice", "a-secret", ""},
	{"# alice", "a-secret", ""},
	{"", "a-secret", ""},
	{"alice", "", ""},
	{strings.Repeat("a", 64), "t", ""},
	{strings.Repeat("a", 65), "t", ""},
	{"alice", "sha256:" + hash("x")[7:], ""},
	{"alice", "sha256:zz", ""},
	{"alice", `"quoted\token"`, ""},
	{"caf\xc3\xa9", "a-secret", ""},
}

// keysFileName is the name FuzzParseKeys gives ParseKeys for its files.
const keysFileName = "api-keys"

// hashesAuthenticate parses a file of hashes, the first that of a known
// token. What it accepts passes checkKeys and gives the token its valid
// principal; KeyLine's line alone is never refused.
func hashesAuthenticate(t *testing.T, principal, token string, extra []byte) {
	t.Helper()
	line := auth.KeyLine(principal, token)
	data := []byte(line + "\n" + string(extra))
	keys, err := auth.ParseKeys(data, keysFileName)
	if err == nil {
		checkKeys(t, data, keys)
		if auth.ValidPrincipal(principal) {
			if got, ok := keys.Authenticate(token); !ok || got != principal {
				t.Fatalf("%q: Authenticate(%q) = %q, %t; want %q", data, token, got, ok, principal)
			}
		}
	}
	if auth.ValidPrincipal(principal) {
		alone, err := auth.ParseKeys([]byte(line+"\n"), keysFileName)
		if err != nil {
			t.Fatalf("ParseKeys(%q) = %v; KeyLine's line refused", line, err)
		}
		if got, ok := alone.Authenticate(token); !ok || got != principal {
			t.Fatalf("%q: Authenticate(%q) = %q, %t; want %q", line, token, got, ok, principal)
		}
	}
}

// tokenForItsHashRefused parses the file with the token written where its
// hash belongs. Its line is refused, and the refusal does not echo the
// token.
func tokenForItsHashRefused(t *testing.T, principal, token string, extra []byte) {
	t.Helper()
	mistaken := []byte(principal + " " + token + "\n" + string(extra))
	keys, err := auth.ParseKeys(mistaken, keysFileName)
	if err == nil {
		checkKeys(t, mistaken, keys)
		// Unless the principal made it a comment or a blank line (or
		// the token looks like a hash), the token's line is refused.
		first, _, _ := strings.Cut(string(mistaken), "\n")
		if isKeyLine(first) && !strings.HasPrefix(token, "sha256:") {
			t.Fatalf("%q: a line of principal and token accepted", mistaken)
		}
		return
	}
	// The token may be in the message only when it is also somewhere
	// else (the principal, another line) or in the wording: with another
	// token of the same length in its place, the message holds it still.
	if strings.Contains(principal, token) || strings.Contains(string(extra), token) {
		return
	}
	msg := err.Error()
	other := []byte(principal + " " + otherToken(token) + "\n" + string(extra))
	msg2 := ""
	if _, err := auth.ParseKeys(other, keysFileName); err != nil {
		msg2 = err.Error()
	}
	quoted := strconv.Quote(token)
	for _, echo := range []string{token, quoted[1 : len(quoted)-1]} {
		if strings.Contains(msg, echo) && !strings.Contains(msg2, echo) {
			t.Fatalf("%q: the error echoes the token %q: %s", mistaken, token, msg)
		}
	}
}

// checkKeys asserts what ParseKeys accepted from data: valid principals
// only, one key per key line in the order of the file, and the same keys
// again from the file written out as KeyLine writes lines.
func checkKeys(t *testing.T, data []byte, keys *auth.Keys) {
	t.Helper()
	principals, hashes := auth.HeldKeys(keys)
	if len(principals) == 0 {
		t.Fatalf("%q: accepted, no keys held", data)
	}
	var keyLines int
	for l := range strings.SplitSeq(string(data), "\n") {
		if isKeyLine(l) {
			keyLines++
		}
	}
	if keyLines != len(principals) {
		t.Fatalf("%q: %d key lines, %d keys held", data, keyLines, len(principals))
	}
	distinct := map[string]bool{}
	var out strings.Builder
	for i, p := range principals {
		if !auth.ValidPrincipal(p) {
			t.Fatalf("%q: holds principal %q", data, p)
		}
		distinct[p] = true
		out.WriteString(p + " sha256:" + hex.EncodeToString(hashes[i][:]) + "\n")
	}
	if keys.IsDev() || keys.Principals() != len(distinct) {
		t.Fatalf("%q: IsDev %t, Principals %d; want false, %d", data, keys.IsDev(), keys.Principals(), len(distinct))
	}
	again, err := auth.ParseKeys([]byte(out.String()), "again")
	if err != nil {
		t.Fatalf("%q: written out as %q, refused: %v", data, out.String(), err)
	}
	p2, h2 := auth.HeldKeys(again)
	if !slices.Equal(principals, p2) || !slices.Equal(hashes, h2) {
		t.Fatalf("%q: written out as %q, reads as %q %x; want %q %x", data, out.String(), p2, h2, principals, hashes)
	}
}

// isKeyLine reports whether l is a line of a keys file that ParseKeys
// reads as a key, not a blank line or a comment.
func isKeyLine(l string) bool {
	l = strings.TrimSpace(l)
	return l != "" && !strings.HasPrefix(l, "#")
}

// otherToken returns a token of the length of token sharing none of its
// bytes after any sha256: prefix, so that it takes the same way through
// ParseKeys unless its bytes are a hash.
func otherToken(token string) string {
	prefix := ""
	if strings.HasPrefix(token, "sha256:") {
		prefix, token = "sha256:", token[len("sha256:"):]
	}
	b := []byte(token)
	for i, c := range b {
		if c == 'x' {
			b[i] = 'y'
		} else {
			b[i] = 'x'
		}
	}
	return prefix + string(b)
}
