package console

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed authentications allowed from one client address: a burst of
// failuresBurst, then one every failureEvery. Operator keys are too long
// to guess. This keeps anyone from trying many anyway, and makes an
// attempt visible in the log.
const (
	failuresBurst = 10
	failureEvery  = 6 * time.Second
	// maxAddrs bounds the addresses remembered. Past it, those that may
	// fail a full burst again are forgotten.
	maxAddrs = 10_000
)

// failures counts failed authentications, a login form's or a bearer
// token's, by client address. An address that used up its allowance is
// refused every authentication until its allowance grows back. A right
// key is refused too, or its answer would tell a guess right. Behind a
// proxy every client shares the proxy's address, and so its allowance.
type failures struct {
	mu    sync.Mutex
	addrs map[string]*rate.Limiter
}

func newFailures() *failures { return &failures{addrs: map[string]*rate.Limiter{}} }

// wait returns how long r's address must wait before it may try to
// authenticate again. It returns 0 when it may try now.
func (f *failures) wait(r *http.Request, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.addrs[clientAddr(r)]
	if l == nil {
		return 0
	}
	if tokens := l.TokensAt(now); tokens < 1 {
		return time.Duration((1 - tokens) * float64(failureEvery))
	}
	return 0
}

// failed counts a failed authentication from r's address.
func (f *failures) failed(r *http.Request, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	addr := clientAddr(r)
	l := f.addrs[addr]
	if l == nil {
		if len(f.addrs) >= maxAddrs {
			f.forgetRecoveredLocked(now)
		}
		l = rate.NewLimiter(rate.Every(failureEvery), failuresBurst)
		f.addrs[addr] = l
	}
	l.AllowN(now, 1)
}

// forgetRecoveredLocked forgets the addresses whose allowance has grown
// back in full: remembering them changes nothing.
func (f *failures) forgetRecoveredLocked(now time.Time) {
	for addr, l := range f.addrs {
		if l.TokensAt(now) >= failuresBurst {
			delete(f.addrs, addr)
		}
	}
}

// clientAddr is the IP address r came from.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// tooManyFailures answers 429, saying when to try again.
func (s *Console) tooManyFailures(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	s.c.Log.Warn("console authentication refused: too many failures from this address", "remote", r.RemoteAddr, "path", r.URL.Path)
	secs := int(wait.Seconds()) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := "too many failed authentications from this address: try again in " + strconv.Itoa(secs) + "s"
	if isAPI(r) {
		writeJSON(w, http.StatusTooManyRequests, apiError{Error: msg})
		return
	}
	s.render(w, http.StatusTooManyRequests, pageData{Login: true, Error: msg})
}
