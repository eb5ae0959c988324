package connlimit

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Listener accepts at most Max connections at once. When it is full, a
// new connection closes the one that has been idle longest (no call in
// progress) to make room. Only when every connection is busy is the new
// one refused. So a client that opens connections and sends nothing can
// never lock out one that calls.
//
// Connections are told apart by their remote address. gRPC reports its
// calls through Calls, and an http.Server through ConnState.
type Listener struct {
	net.Listener
	max      int
	refusals *Refusals

	mu    sync.Mutex
	conns map[string]*conn
}

// Limit returns a Listener that accepts at most n connections from inner.
// An n below 1 is 1.
func Limit(inner net.Listener, n int, refusals *Refusals) *Listener {
	return &Listener{Listener: inner, max: max(n, 1), refusals: refusals, conns: map[string]*conn{}}
}

// Max is the most connections l holds at once.
func (l *Listener) Max() int { return l.max }

// Open is the number of connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Accept returns the next connection that fits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
				l.refusals.add(AcceptError, "accept failed: the server waits and accepts again", "err", err.Error())
			}
			return nil, err
		}
		if tracked, ok := l.admit(c); ok {
			return tracked, nil
		}
		// Counted before the close, so that whoever sees the close also
		// sees it counted.
		l.refusals.add(ConnectionLimit, "connection refused: every connection has a call in progress", "max_connections", l.max)
		c.Close()
	}
}

// isTemporary says whether err is one a server accepts again after, as
// net/http and grpc-go do. Running out of file descriptors is one.
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// admit tracks c if there is room, or if closing the connection idle
// longest makes room. A connection whose write has been blocked for
// slowWrite, its client not reading, is closed when no idle one is.
func (l *Listener) admit(c net.Conn) (net.Conn, bool) {
	key := c.RemoteAddr().String()
	l.mu.Lock()
	var victim *conn
	reason, msg := IdleEvicted, "idle connection closed to make room for a new one"
	if len(l.conns) >= l.max {
		victim = l.idlest()
		if victim == nil {
			victim = l.slowest()
			reason, msg = SlowReaderEvicted, "connection closed to make room for a new one: its client did not read what was written"
		}
		if victim == nil {
			l.mu.Unlock()
			return nil, false
		}
		delete(l.conns, victim.key)
	}
	tracked := &conn{Conn: c, l: l, key: key, idleSince: time.Now()}
	l.conns[key] = tracked
	l.mu.Unlock()
	if victim != nil {
		l.refusals.add(reason, msg, "max_connections", l.max)
		victim.Conn.Close()
	}
	return tracked, true
}

// idlest is the connection idle longest, or nil when all are busy.
func (l *Listener) idlest() *conn {
	var victim *conn
	for _, o := range l.conns {
		if o.busy() == 0 && (victim == nil || o.idleSince.Before(victim.idleSince)) {
			victim = o
		}
	}
	return victim
}

// slowWrite is how long a write may block before its connection counts
// as one whose client does not read.
const slowWrite = time.Second

// slowest is the connection whose write has been blocked longest, past
// slowWrite, or nil.
func (l *Listener) slowest() *conn {
	var victim *conn
	oldest := time.Now().Add(-slowWrite).UnixNano()
	for _, o := range l.conns {
		if since := o.writingSince.Load(); since != 0 && since < oldest {
			victim, oldest = o, since
		}
	}
	return victim
}

// begin marks the connection from remote busy with one more call. It
// returns what marks the call done, and the connection's answers (nil
// when not followed). A remote unknown to l, such as an in-memory
// connection, gives a no-op.
func (l *Listener) begin(remote string) (end func(), a *answers) {
	l.mu.Lock()
	c := l.conns[remote]
	if c != nil {
		c.calls++
		a = c.answers
	}
	l.mu.Unlock()
	if c == nil {
		return func() {}, nil
	}
	return func() {
		l.mu.Lock()
		if c.calls--; c.busy() == 0 {
			c.idleSince = time.Now()
		}
		l.mu.Unlock()
	}, a
}

// setAnswers ties c to the answers that follow its calls.
func (c *conn) setAnswers(a *answers) {
	c.l.mu.Lock()
	c.answers = a
	c.l.mu.Unlock()
}

// ConnState is an http.Server's ConnState hook. A connection serving a
// request, or hijacked, is busy. One between requests is idle.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conns[nc.RemoteAddr().String()]
	if c == nil {
		return
	}
	switch state {
	case http.StateActive, http.StateHijacked:
		c.http = true
	case http.StateIdle:
		c.http = false
		c.idleSince = time.Now()
	}
}

func (l *Listener) forget(c *conn) {
	l.mu.Lock()
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
	l.mu.Unlock()
}

// conn is a connection l tracks; its fields are guarded by l.mu.
type conn struct {
	net.Conn
	l         *Listener
	key       string
	calls     int       // gRPC calls in progress
	answers   *answers  // what follows its gRPC calls, if anything does
	http      bool      // an HTTP request in progress
	idleSince time.Time // when it last became idle, or was accepted
	// writingSince is when the write in progress began, in Unix
	// nanoseconds; 0 when none is.
	writingSince atomic.Int64
	closeOnce    sync.Once
}

func (c *conn) busy() int {
	if c.http {
		return c.calls + 1
	}
	return c.calls
}

// writeStalled reports whether a write has been blocked for slowWrite:
// the client does not read.
func (c *conn) writeStalled() bool {
	since := c.writingSince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= slowWrite
}

// Write notes how long it blocks: a client that does not read blocks it.
// A write past its deadline is counted.
func (c *conn) Write(b []byte) (int, error) {
	c.writingSince.Store(time.Now().UnixNano())
	n, err := c.Conn.Write(b)
	c.writingSince.Store(0)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.l.refusals.add(WriteTimeout, "answer not written within its bound: its connection is closed", "remote", c.key)
	}
	return n, err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}
