// Package console is the operator console: a small HTML page and its JSON
// API. Through it, support staff look an idempotency key up by principal
// and key. They can also release a stored error that may be released.
// They need no shell on the host and no customer's token.
// Every request needs an operator's credential (Config.Operators). That is
// a bearer token, or the session cookie that logging in with one sets.
package console

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/internal/bearer"
	"github.com/paymentsd/paymentsd/storage"
)

// Store is what the console needs of the daemon's idempotency store.
// That is a record read, the release that storage.Releaser guards, and the
// list of claims in flight.
type Store interface {
	Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error)
	storage.Releaser
	storage.InFlightLister
}

// Config is what a Console serves with.
type Config struct {
	Store Store
	// Operators returns the operators' credentials in use, in the
	// --api-keys format (auth.LoadFile), the names being operators'. It is
	// called on every request, so that keys reloaded take effect at the
	// next. Dev mode is refused: any token would be an operator.
	Operators func() *auth.Keys
	// Intents are the payment intents a record names, shown to operators
	// by owner and id. When they are an intentsearch.Store too, as
	// boltintents' and pgintents' stores are, the console also lists a
	// principal's intents and finds their suspected double payments.
	Intents Intents
	Log     *slog.Logger
	// TLS says the console is served over TLS, so that its cookie is
	// marked Secure.
	TLS bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Console serves the page and the API.
type Console struct {
	c        Config
	mux      *http.ServeMux
	sessions *sessions
	failures *failures
}

// New returns the console of c. It panics when c lacks a part, or when its
// operators accept any token. A console open to anyone must not start.
func New(c Config) *Console {
	if c.Operators == nil || c.Operators() == nil || c.Operators().IsDev() || c.Store == nil || c.Intents == nil || c.Log == nil {
		panic("console: needs the stores, a logger and a file of operator keys")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &Console{c: c, mux: http.NewServeMux(), sessions: newSessions(), failures: newFailures()}
	s.mux.Handle("GET /api/v1/record", s.operatorOnly(s.apiRecord))
	s.mux.Handle("POST /api/v1/release", s.operatorOnly(s.apiRelease))
	s.mux.Handle("GET /api/v1/in-flight", s.operatorOnly(s.apiInFlight))
	s.mux.Handle("GET /in-flight", s.operatorOnly(s.pageInFlight))
	s.mux.Handle("GET /api/v1/intent", s.operatorOnly(s.apiIntent))
	s.mux.Handle("GET /intent", s.operatorOnly(s.pageIntent))
	s.mux.Handle("GET /api/v1/intents", s.operatorOnly(s.apiIntents))
	s.mux.Handle("GET /intents", s.operatorOnly(s.pageIntents))
	s.mux.Handle("GET /api/v1/duplicates", s.operatorOnly(s.apiDuplicates))
	s.mux.Handle("GET /duplicates", s.operatorOnly(s.pageDuplicates))
	s.mux.Handle("GET /{$}", s.operatorOnly(s.page))
	s.mux.Handle("GET /key", s.operatorOnly(s.pageKeyRecord))
	s.mux.Handle("GET /api/v1/keys", s.operatorOnly(s.apiKeys))
	s.mux.Handle("GET /release", s.operatorOnly(s.pageConfirmRelease))
	s.mux.Handle("POST /release", s.operatorOnly(s.pageRelease))
	s.mux.Handle("POST /logout", s.operatorOnly(s.logout))
	s.mux.HandleFunc("POST /login", s.login)
	// Anything else is 401 too without a credential. Nothing answers
	// anyone else, not even which paths exist.
	s.mux.Handle("/", s.operatorOnly(func(w http.ResponseWriter, r *http.Request, _ operator) { http.NotFound(w, r) }))
	return s
}

// ServeHTTP serves r. Every answer is kept out of caches and frames: it
// names customers' keys.
func (s *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	r.Body = http.MaxBytesReader(w, r.Body, maxBody) // a form is small
	s.mux.ServeHTTP(w, r)
}

// maxBody bounds a request's body. The largest form, a release's, holds a
// principal, a key and a CSRF token.
const maxBody = 16 << 10

// operator is who makes a request. It holds the name the operator key file
// gives their credential. It holds their session too when they came by
// cookie.
type operator struct {
	name    string
	session *session // nil for a bearer token
}

// operatorFunc is a handler for an authenticated operator.
type operatorFunc func(w http.ResponseWriter, r *http.Request, op operator)

// operatorOnly runs h for an operator. It answers anyone else 401, or 429
// once their address failed too often (see failures). A POST by session
// cookie must also carry the session's CSRF token. The browser sends a
// cookie whoever's page asks, but it does not send a bearer token.
func (s *Console) operatorOnly(h operatorFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearer := len(r.Header.Values("Authorization")) > 0
		if bearer {
			if wait := s.failures.wait(r, s.c.Now()); wait > 0 {
				s.tooManyFailures(w, r, wait)
				return
			}
		}
		op, ok := s.authenticate(r)
		if !ok {
			if bearer {
				s.failures.failed(r, s.c.Now())
				s.c.Log.Warn("console request refused: not an operator key", "remote", r.RemoteAddr, "path", r.URL.Path)
			}
			s.unauthorized(w, r)
			return
		}
		if op.session != nil && r.Method == http.MethodPost &&
			subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(op.session.csrf)) != 1 {
			s.c.Log.Warn("console request refused: no CSRF token of the session", "operator", op.name, "path", r.URL.Path)
			http.Error(w, "the form is stale or not this console's: reload the page", http.StatusForbidden)
			return
		}
		h(w, r, op)
	})
}

// authenticate finds the request's operator. It uses the Authorization
// header when there is one, which then must name an operator. Otherwise it
// uses the session cookie.
func (s *Console) authenticate(r *http.Request) (operator, bool) {
	if values := r.Header.Values("Authorization"); len(values) > 0 {
		token, err := bearer.Parse(values)
		if err != nil {
			return operator{}, false
		}
		name, ok := s.operators().Authenticate(token)
		return operator{name: name}, ok
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return operator{}, false
	}
	sess := s.sessions.get(c.Value, s.c.Now())
	if sess == nil {
		return operator{}, false
	}
	// The key it logged in with must still be the operator's. A key
	// removed from --admin-keys ends its sessions too.
	if name, ok := s.operators().AuthenticateDigest(sess.keySum); !ok || name != sess.operator {
		s.sessions.remove(c.Value)
		s.c.Log.Warn("console session ended: its operator key is no longer listed", "operator", sess.operator)
		return operator{}, false
	}
	return operator{name: sess.operator, session: sess}, true
}

// operators are the operators' keys in use. The loader refuses a reload
// that emptied them, since a file must list a key. So they never turn into
// dev mode's "any token". operators checks that again all the same.
func (s *Console) operators() *auth.Keys {
	if k := s.c.Operators(); k != nil && !k.IsDev() {
		return k
	}
	return auth.None()
}

// unauthorized answers 401: JSON for the API, the login form for the page.
func (s *Console) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="paymentsd console"`)
	if isAPI(r) {
		writeJSON(w, http.StatusUnauthorized, apiError{Error: "an operator credential is required: Authorization: Bearer <operator key from --admin-keys>"})
		return
	}
	s.render(w, http.StatusUnauthorized, pageData{Login: true})
}
