package console

import (
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/internal/bearer"
)

// cookieName is the session cookie's name.
const cookieName = "paymentsd_console"

// sessionLife is how long a login lasts: a working shift.
const sessionLife = 8 * time.Hour

// session is a logged-in operator's.
type session struct {
	operator string
	keySum   [sha256.Size]byte // of the operator key it logged in with

	csrf    string // the token every form of the session carries
	expires time.Time
}

// sessions are the sessions in memory, by the SHA-256 of their cookie's
// value. So the map holds no credential. A restart logs everyone out.
type sessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*session
}

func newSessions() *sessions { return &sessions{m: map[[sha256.Size]byte]*session{}} }

// add starts a session of operator, dropping those that have expired, and
// returns its cookie's value.
func (ss *sessions) add(operator string, keySum [sha256.Size]byte, now time.Time) (cookie string) {
	cookie, csrf := rand.Text(), rand.Text()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, k)
		}
	}
	ss.m[sha256.Sum256([]byte(cookie))] = &session{operator: operator, keySum: keySum, csrf: csrf, expires: now.Add(sessionLife)}
	return cookie
}

// get returns the live session of cookie, or nil.
func (ss *sessions) get(cookie string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[sha256.Sum256([]byte(cookie))]
	if s == nil || !now.Before(s.expires) {
		return nil
	}
	return s
}

// remove ends the session of cookie.
func (ss *sessions) remove(cookie string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sha256.Sum256([]byte(cookie)))
}

// login answers POST /login. The form's operator key, if it names an
// operator, starts a session, and the page follows. The key is never
// logged.
func (s *Console) login(w http.ResponseWriter, r *http.Request) {
	if wait := s.failures.wait(r, s.c.Now()); wait > 0 {
		s.tooManyFailures(w, r, wait)
		return
	}
	token, err := bearer.ParseToken(r.PostFormValue("token"))
	name, ok := "", false
	if err == nil {
		name, ok = s.operators().Authenticate(token)
	}
	if !ok {
		s.failures.failed(r, s.c.Now())
		s.c.Log.Warn("console login refused", "remote", r.RemoteAddr)
		s.render(w, http.StatusUnauthorized, pageData{Login: true, Error: "that is not an operator key"})
		return
	}
	s.c.Log.Info("console login", "operator", name, "remote", r.RemoteAddr)
	http.SetCookie(w, s.cookie(s.sessions.add(name, sha256.Sum256([]byte(token)), s.c.Now()), int(sessionLife/time.Second)))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout answers POST /logout: the session ends.
func (s *Console) logout(w http.ResponseWriter, r *http.Request, op operator) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.sessions.remove(c.Value)
	}
	s.c.Log.Info("console logout", "operator", op.name)
	http.SetCookie(w, s.cookie("", -1))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// cookie is the session cookie holding value. It is out of scripts' reach
// and sent to this console's own pages only. It is sent only over TLS when
// the console is served so.
func (s *Console) cookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.c.TLS, SameSite: http.SameSiteStrictMode}
}
