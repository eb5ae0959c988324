package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/internal/bearer"
)

// Source is where a request's principal comes from.
type Source int

const (
	// FromBearer: the bearer token, looked up in the keys.
	FromBearer Source = iota
	// FromCert: the verified client certificate (see CertPrincipal); an
	// authorization header is not read.
	FromCert
	// FromEither: the bearer token when an authorization header is sent,
	// else the client certificate.
	FromEither
)

// ParseSource reads the --principal-from values bearer, cert and either.
func ParseSource(s string) (Source, error) {
	switch s {
	case "bearer":
		return FromBearer, nil
	case "cert":
		return FromCert, nil
	case "either":
		return FromEither, nil
	}
	return 0, fmt.Errorf("%q is not one of bearer, cert, either", s)
}

func (s Source) String() string {
	switch s {
	case FromCert:
		return "cert"
	case FromEither:
		return "either"
	}
	return "bearer"
}

// Authenticator turns a request's credentials into its principal, the same
// way for every face. Its keys can be replaced while it serves.
type Authenticator struct {
	source Source
	keys   atomic.Pointer[Keys]
	// trusted, when set, says whether a connection's verified client
	// certificate chain is still trusted. See SetChainCheck.
	trusted func(chain []*x509.Certificate, now time.Time) error
}

// NewAuthenticator returns an Authenticator that takes principals from
// source, with keys for bearer tokens.
func NewAuthenticator(source Source, keys *Keys) *Authenticator {
	a := &Authenticator{source: source}
	a.keys.Store(keys)
	return a
}

// SetKeys replaces the keys from the next request on. A token removed from
// them is refused from then on.
func (a *Authenticator) SetKeys(k *Keys) { a.keys.Store(k) }

// SetChainCheck makes each request with a verified client certificate ask
// check whether its chain is still trusted. A connection outlives the
// handshake that verified it. A CA removed from the trusted ones may not go
// on speaking for a principal. Nor may a certificate that expired since.
// Call it before serving.
func (a *Authenticator) SetChainCheck(check func(chain []*x509.Certificate, now time.Time) error) {
	a.trusted = check
}

// Keys returns the keys in use.
func (a *Authenticator) Keys() *Keys { return a.keys.Load() }

// Source returns where a's principals come from.
func (a *Authenticator) Source() Source { return a.source }

// AuthenticateConn authenticates a request that sent authorization over a
// connection whose TLS state is conn (nil for plaintext). It checks the
// verified client certificate again, if any, then calls Authenticate.
func (a *Authenticator) AuthenticateConn(authorization []string, conn *tls.ConnectionState) (string, error) {
	var cert *x509.Certificate
	if conn != nil && len(conn.VerifiedChains) > 0 {
		var why error
		for _, chain := range conn.VerifiedChains { // one trusted chain will do, as at the handshake
			if why = nil; a.trusted != nil {
				why = a.trusted(chain, time.Now())
			}
			if why == nil {
				cert = chain[0]
				break
			}
		}
		if cert == nil {
			return "", status.Errorf(codes.Unauthenticated, "the client certificate is no longer trusted: %v; connect again with a trusted one", why)
		}
	}
	return a.Authenticate(authorization, cert)
}

// Authenticate returns the principal of a request that sent authorization
// over a connection whose verified client certificate is cert. The header's
// values come in authorization, in order. A connection without a verified
// certificate passes nil. The error is an UNAUTHENTICATED status error
// whose message says what is wrong.
func (a *Authenticator) Authenticate(authorization []string, cert *x509.Certificate) (string, error) {
	if a.source == FromCert || (a.source == FromEither && len(authorization) == 0) {
		if cert == nil {
			if a.source == FromEither {
				return "", status.Error(codes.Unauthenticated, "send a client certificate or an authorization: Bearer <token> header")
			}
			return "", status.Error(codes.Unauthenticated, "this server takes principals from client certificates: connect with one")
		}
		return CertPrincipal(cert)
	}
	token, err := bearer.Parse(authorization)
	if err != nil {
		return "", err
	}
	principal, ok := a.keys.Load().Authenticate(token)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	return principal, nil
}

// CertPrincipal returns the principal a verified client certificate names.
// That is its URI SAN, such as the SPIFFE ID spiffe://example.org/payments.
// Without one, it is "dns:" and the certificate's first DNS SAN. Either form
// has characters an API key file's principal cannot. So no certificate can
// take a token's keys.
//
// Two certificates name one principal only when their names are the same.
// A URI is taken only as scheme://host/path written plainly, as SPIFFE IDs
// are. It may have no percent-encoding, user, query or fragment. So "a%20b"
// and "a b" cannot be one principal written twice. Scheme and host compare
// without case, so they are lower-cased, as DNS names are. A wildcard DNS
// name names no one client, so it is refused.
func CertPrincipal(cert *x509.Certificate) (string, error) {
	var p string
	switch {
	case len(cert.URIs) > 1:
		return "", status.Errorf(codes.Unauthenticated, "the client certificate has %d URI SANs; a principal is one", len(cert.URIs))
	case len(cert.URIs) == 1:
		u := cert.URIs[0]
		host := strings.ToLower(u.Host)
		if strings.EqualFold(u.Scheme, "dns") {
			return "", status.Errorf(codes.Unauthenticated, "the client certificate's URI SAN %+q has the scheme dns, which names DNS SANs' principals", u.String())
		}
		if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.RawPath != "" || u.ForceQuery ||
			!plainHost.MatchString(host) || !plainPath.MatchString(u.Path) {
			return "", status.Errorf(codes.Unauthenticated, "the client certificate's URI SAN %+q is not a plain scheme://host/path (no percent-encoding, user, query or fragment)", u.String())
		}
		p = strings.ToLower(u.Scheme) + "://" + host + u.Path
	case len(cert.DNSNames) > 0:
		name := strings.TrimSuffix(strings.ToLower(cert.DNSNames[0]), ".") // "a.example." is "a.example"
		switch {
		case strings.Contains(name, "*"):
			return "", status.Errorf(codes.Unauthenticated, "the client certificate's DNS SAN %+q is a wildcard, which names no one client", name)
		case !hostName.MatchString(name):
			return "", status.Errorf(codes.Unauthenticated, "the client certificate's DNS SAN %+q is not a host name (letters, digits and hyphens, in dot-separated labels)", name)
		}
		p = "dns:" + name
	default:
		return "", status.Error(codes.Unauthenticated, "the client certificate has no URI or DNS SAN to name its principal")
	}
	if !ValidCertPrincipal(p) {
		return "", status.Errorf(codes.Unauthenticated, "the client certificate's SAN %+q cannot name a principal: use printable ASCII, at most 512 bytes", p)
	}
	return p, nil
}

// plainPath is a path that net/url writes as it reads it. A character it
// would escape, such as a space or "!", might have been written either way.
// Two certificates could then name one principal in two spellings.
var (
	hostName  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	plainHost = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?$`)
	plainPath = regexp.MustCompile(`^(/[A-Za-z0-9._~$&+,;=:@-]*)*$`)
)

var certPrincipalPattern = regexp.MustCompile(`^(dns:[!-~]{1,508}|[A-Za-z][A-Za-z0-9+.-]*://[!-~]{1,500})$`)

// ValidCertPrincipal reports whether name is a principal CertPrincipal can
// give. That is a URI with a scheme and "://", or "dns:" and a name. It is
// printable ASCII without spaces, at most 512 bytes.
func ValidCertPrincipal(name string) bool {
	return len(name) <= 512 && certPrincipalPattern.MatchString(name)
}

// ForwardedPrincipalHeader is the metadata in which a face passes the
// principal it authenticated. Such a face, like the HTTP face, stands in
// front of the gRPC server. The header is read only from connections whose
// AuthInfo is Forwarded. A network client cannot have that AuthInfo. From
// any other connection the header is ignored.
const ForwardedPrincipalHeader = "paymentsd-forwarded-principal"

// ForwardedRefusalHeader carries, instead, why the face refused its
// caller's credentials. The server answers UNAUTHENTICATED with it. It does
// so at the point where it would have refused a gRPC caller.
const ForwardedRefusalHeader = "paymentsd-forwarded-refusal"

// Forwarded is the AuthInfo of an in-process connection from a face that
// has authenticated its callers itself.
type Forwarded struct{ credentials.CommonAuthInfo }

// AuthType implements credentials.AuthInfo.
func (Forwarded) AuthType() string { return "paymentsd-forwarded" }

// UnaryServerInterceptor authenticates every call to a method whose full
// name starts with one of prefixes. It passes other calls through, such as
// health checks.
func UnaryServerInterceptor(a *Authenticator, prefixes ...string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !hasAnyPrefix(info.FullMethod, prefixes) {
			return handler(ctx, req)
		}
		principal, err := a.authenticateCall(ctx)
		if err != nil {
			return nil, err
		}
		return handler(NewContext(ctx, principal), req)
	}
}

// authenticateCall authenticates a gRPC call by its metadata and its
// connection's client certificate. On a Forwarded connection, it takes the
// principal the face passes.
func (a *Authenticator) authenticateCall(ctx context.Context) (string, error) {
	p, _ := peer.FromContext(ctx)
	var conn *tls.ConnectionState
	if p != nil {
		switch info := p.AuthInfo.(type) {
		case Forwarded:
			if why := metadata.ValueFromIncomingContext(ctx, ForwardedRefusalHeader); len(why) > 0 {
				return "", status.Error(codes.Unauthenticated, why[0])
			}
			vals := metadata.ValueFromIncomingContext(ctx, ForwardedPrincipalHeader)
			if len(vals) != 1 || vals[0] == "" { // the face's defect, not the caller's
				return "", status.Error(codes.Internal, "the HTTP face forwarded no principal")
			}
			return vals[0], nil
		case credentials.TLSInfo:
			conn = &info.State
		}
	}
	return a.AuthenticateConn(metadata.ValueFromIncomingContext(ctx, "authorization"), conn)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
