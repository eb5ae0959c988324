// Package auth turns a request's credentials into its principal. The
// credentials are a bearer token or a client certificate. The principal owns
// the request's payment intents and idempotency keys. Tokens are hashed on
// arrival and never kept, stored or logged.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/internal/safefile"
)

// Keys authenticates bearer tokens.
type Keys struct {
	keys []key // nil in dev mode
}

type key struct {
	principal string
	hash      [sha256.Size]byte
}

// Dev accepts any bearer token as a principal of its own, named "dev:" and
// the token's SHA-256 in hex. For development only.
func Dev() *Keys { return &Keys{} }

// None returns keys that accept no token.
func None() *Keys { return &Keys{keys: []key{}} }

// IsDev reports whether k accepts any token.
func (k *Keys) IsDev() bool { return k.keys == nil }

// Principals returns how many principals k accepts tokens of. It is 0 in
// dev mode, where any token is its own principal.
func (k *Keys) Principals() int {
	seen := map[string]bool{}
	for _, key := range k.keys {
		seen[key.principal] = true
	}
	return len(seen)
}

var principalPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidPrincipal reports whether name may name a principal in an API key
// file. Such a name is 1 to 64 of A-Z a-z 0-9 . _ -.
func ValidPrincipal(name string) bool { return principalPattern.MatchString(name) }

var devPrincipalPattern = regexp.MustCompile(`^dev:[0-9a-f]{64}$`)

// ValidDevPrincipal reports whether name is a principal dev mode gives a
// token. Such a name is "dev:" and the token's SHA-256 in hex.
func ValidDevPrincipal(name string) bool { return devPrincipalPattern.MatchString(name) }

// KeyLine returns the API key file line that accepts token for principal,
// as LoadFile reads it.
func KeyLine(principal, token string) string {
	sum := sha256.Sum256([]byte(token))
	return principal + " sha256:" + hex.EncodeToString(sum[:])
}

// LoadFile reads API keys from the file at path (see ParseKeys). The file
// must be a regular file that neither group nor others may write. Whoever
// can change it can let themselves in.
func LoadFile(path string) (*Keys, error) { return LoadFileOf(path, "api keys") }

// LoadFileOf is LoadFile for another file of the same format. Its errors
// name the file what, such as "operator keys". A refusal then says which
// file it is.
func LoadFileOf(path, what string) (*Keys, error) {
	data, err := safefile.ReadPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return parseKeys(data, path, what)
}

// PrincipalOfToken returns the principal of token, as a server given the
// file at path would name it. That is the principal the API keys file lists
// for token. When path is empty, it is dev mode's principal.
func PrincipalOfToken(token, path string) (string, error) {
	keys := Dev()
	if path != "" {
		var err error
		if keys, err = LoadFile(path); err != nil {
			return "", err
		}
	}
	p, ok := keys.Authenticate(token)
	if !ok {
		return "", fmt.Errorf("the token is not listed in %s", path)
	}
	return p, nil
}

// ParseKeys reads API keys from data, the content of the file name. Each
// line is "<principal> sha256:<hex>", the hex being the token's SHA-256
// (`printf %s "$TOKEN" | sha256sum`). Blank lines and lines starting with #
// are skipped. The file holds no token, so leaking it gives no access.
// A principal may have several lines, so it can roll its token without
// downtime. A hash listed twice is refused, and the error names both lines.
// Otherwise its token would silently belong to one of them.
func ParseKeys(data []byte, name string) (*Keys, error) { return parseKeys(data, name, "api keys") }

func parseKeys(data []byte, name, what string) (*Keys, error) {
	k := &Keys{keys: []key{}}
	seen := map[[sha256.Size]byte]int{} // hash to its line
	for i, text := range strings.Split(string(data), "\n") {
		line := i + 1
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 || !strings.HasPrefix(fields[1], "sha256:") {
			return nil, fmt.Errorf("%s: %s:%d: want \"<principal> sha256:<hex of the token's SHA-256>\"", what, name, line)
		}
		principal, hexSum := fields[0], strings.TrimPrefix(fields[1], "sha256:")
		if !ValidPrincipal(principal) {
			return nil, fmt.Errorf("%s: %s:%d: principal %q: use 1 to 64 of A-Z a-z 0-9 . _ -", what, name, line, principal)
		}
		sum, err := hex.DecodeString(hexSum)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%s: %s:%d: the hash must be 64 hex digits", what, name, line)
		}
		kk := key{principal: principal}
		copy(kk.hash[:], sum)
		if first, ok := seen[kk.hash]; ok {
			return nil, fmt.Errorf("%s: %s:%d: this hash is already listed on line %d; one token must belong to one principal", what, name, line, first)
		}
		seen[kk.hash] = line
		k.keys = append(k.keys, kk)
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("%s: %s lists no keys", what, name)
	}
	return k, nil
}

// Authenticate returns the principal of token. It compares the token's hash
// with every key in constant time. Timing thus tells nothing of which key,
// if any, came close.
func (k *Keys) Authenticate(token string) (string, bool) {
	return k.AuthenticateDigest(sha256.Sum256([]byte(token)))
}

// AuthenticateDigest is Authenticate of the token whose SHA-256 is sum.
// A login session uses it to check the keys in use on every request. The
// session thus need not keep the token itself.
func (k *Keys) AuthenticateDigest(sum [sha256.Size]byte) (string, bool) {
	if k.IsDev() {
		return "dev:" + hex.EncodeToString(sum[:]), true
	}
	found := -1
	for i := range k.keys {
		if subtle.ConstantTimeCompare(sum[:], k.keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return k.keys[found].principal, true
}

type principalKey struct{}

// NewContext returns ctx carrying principal.
func NewContext(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// FromContext returns the principal authenticated for the request.
func FromContext(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// Scope is the idempotency interceptor's ScopeFunc: a caller's keys belong
// to its principal.
func Scope(ctx context.Context) (string, error) {
	if p, ok := FromContext(ctx); ok {
		return p, nil
	}
	return "", status.Error(codes.Unauthenticated, "no authenticated principal")
}

// Shared returns the principals of k and of other that hold one token.
// That token is the first hash of k's that other lists too. It checks keys
// that must never meet, such as an API's and its operators'.
func (k *Keys) Shared(other *Keys) (mine, theirs string, ok bool) {
	if k == nil || other == nil {
		return "", "", false
	}
	theirsOf := make(map[[sha256.Size]byte]string, len(other.keys))
	for _, o := range other.keys {
		theirsOf[o.hash] = o.principal
	}
	for _, m := range k.keys {
		if p, found := theirsOf[m.hash]; found {
			return m.principal, p, true
		}
	}
	return "", "", false
}
