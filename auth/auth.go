// Package auth turns a request's bearer token into the principal that owns
// its payment intents and idempotency keys. Tokens are hashed on arrival and
// never kept, stored or logged.
package auth

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
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

// IsDev reports whether k accepts any token.
func (k *Keys) IsDev() bool { return k.keys == nil }

// Principals returns how many principals k accepts tokens of (0 in dev
// mode, where any token is its own).
func (k *Keys) Principals() int {
	seen := map[string]bool{}
	for _, key := range k.keys {
		seen[key.principal] = true
	}
	return len(seen)
}

var principalPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidPrincipal reports whether name may name a principal in an API key
// file: 1 to 64 of A-Z a-z 0-9 . _ -.
func ValidPrincipal(name string) bool { return principalPattern.MatchString(name) }

var devPrincipalPattern = regexp.MustCompile(`^dev:[0-9a-f]{64}$`)

// ValidDevPrincipal reports whether name is a principal dev mode gives a
// token: "dev:" and the token's SHA-256 in hex.
func ValidDevPrincipal(name string) bool { return devPrincipalPattern.MatchString(name) }

// KeyLine returns the API key file line that accepts token for principal,
// as LoadFile reads it.
func KeyLine(principal, token string) string {
	sum := sha256.Sum256([]byte(token))
	return principal + " sha256:" + hex.EncodeToString(sum[:])
}

// LoadFile reads API keys from path: one "<principal> sha256:<hex>" per line,
// the hex being the SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
// Blank lines and lines starting with # are skipped. The file holds no
// token, so leaking it gives no access. A principal may have several lines,
// so that it can roll its token without downtime; a hash listed twice is
// refused, naming both lines, since its token would belong to one of them
// silently.
func LoadFile(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api keys: %w", err)
	}
	defer f.Close()
	k := &Keys{keys: []key{}}
	seen := map[[sha256.Size]byte]int{} // hash to its line
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 || !strings.HasPrefix(fields[1], "sha256:") {
			return nil, fmt.Errorf("api keys: %s:%d: want \"<principal> sha256:<hex of the token's SHA-256>\"", path, line)
		}
		principal, hexSum := fields[0], strings.TrimPrefix(fields[1], "sha256:")
		if !ValidPrincipal(principal) {
			return nil, fmt.Errorf("api keys: %s:%d: principal %q: use 1 to 64 of A-Z a-z 0-9 . _ -", path, line, principal)
		}
		sum, err := hex.DecodeString(hexSum)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("api keys: %s:%d: the hash must be 64 hex digits", path, line)
		}
		kk := key{principal: principal}
		copy(kk.hash[:], sum)
		if first, ok := seen[kk.hash]; ok {
			return nil, fmt.Errorf("api keys: %s:%d: this hash is already listed on line %d; one token must belong to one principal", path, line, first)
		}
		seen[kk.hash] = line
		k.keys = append(k.keys, kk)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api keys: %s: %w", path, err)
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("api keys: %s lists no keys", path)
	}
	return k, nil
}

// Authenticate returns the principal of token. It compares the token's hash
// with every key in constant time, so timing tells nothing of which key, if
// any, came close.
func (k *Keys) Authenticate(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
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

// UnaryServerInterceptor authenticates every call to a method whose full
// name starts with one of prefixes, and passes the others through (health
// checks, for example).
func UnaryServerInterceptor(k *Keys, prefixes ...string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !hasAnyPrefix(info.FullMethod, prefixes) {
			return handler(ctx, req)
		}
		token, err := interceptor.BearerToken(ctx)
		if err != nil {
			return nil, err
		}
		principal, ok := k.Authenticate(token)
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
		}
		return handler(NewContext(ctx, principal), req)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
