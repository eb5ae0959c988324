// Package connlimit bounds what a client can hold on paymentsd's
// listeners before it has proved who it is. That is open connections,
// calls in progress and unfinished HTTP/2 header blocks. Each refusal is
// counted and logged. It is logged at most once a second for each kind, so
// a flood does not flood the log.
package connlimit

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Reason is why a limit closed a connection or refused a call, as the
// metrics label it.
type Reason string

const (
	// ConnectionLimit: a new connection was refused, the listener being
	// full of connections with calls in progress.
	ConnectionLimit Reason = "connection_limit"
	// IdleEvicted: an idle connection was closed to make room for a new
	// one.
	IdleEvicted Reason = "idle_evicted"
	// AcceptError: the listener failed to accept, for instance out of
	// file descriptors.
	AcceptError Reason = "accept_error"
	// Handshake: a TLS handshake failed.
	Handshake Reason = "handshake"
	// Preface: a connection did not begin with the HTTP/2 preface.
	Preface Reason = "preface"
	// HeaderTimeout: a header block stayed unfinished past its bound, and
	// its connection was closed.
	HeaderTimeout Reason = "header_timeout"
	// CallLimit: a call was refused, the server handling as many as it may.
	CallLimit Reason = "call_limit"
	// CallEvicted: a call whose request had not arrived was cancelled to
	// make room for a new one.
	CallEvicted Reason = "call_evicted"
	// AnswerEvicted: a connection was closed to make room for a new call.
	// An answer of its waited for a window its client did not grant.
	AnswerEvicted Reason = "answer_evicted"
	// UnreadRefused: a call was refused, its connection holding more
	// unread answers than its bound.
	UnreadRefused Reason = "unread_refused"
	// UnreadClosed: a connection was closed. It held more unread answers
	// than its bound past the grace, or the most of all when the server's
	// total was over its bound.
	UnreadClosed Reason = "unread_closed"
	// SlowReaderEvicted: a connection whose write had been blocked, its
	// client not reading, was closed to make room for a new one.
	SlowReaderEvicted Reason = "slow_reader_evicted"
	// WriteTimeout: an HTTP answer could not be written within its bound,
	// and its connection was closed.
	WriteTimeout Reason = "write_timeout"
	// FlowControl: a client raised a flow-control window past what
	// HTTP/2 allows, and its connection was closed.
	FlowControl Reason = "flow_control"
	// AnonymousLimit: a call that needs no credential was refused, as
	// many such calls being in progress as may be.
	AnonymousLimit Reason = "anonymous_limit"
)

// Reasons lists every Reason, for metrics that start at zero.
var Reasons = [...]Reason{ConnectionLimit, IdleEvicted, AcceptError, Handshake, Preface, HeaderTimeout, CallLimit, CallEvicted,
	AnswerEvicted, UnreadRefused, UnreadClosed, SlowReaderEvicted, WriteTimeout, FlowControl, AnonymousLimit}

// Refusals counts and logs what the limits of one listener refused.
type Refusals struct {
	listener string
	logger   *slog.Logger
	counts   [len(Reasons)]atomic.Int64

	mu         sync.Mutex
	lastLogged map[Reason]time.Time
	suppressed map[Reason]int
}

var reasonIndex = func() map[Reason]int {
	m := map[Reason]int{}
	for i, r := range Reasons {
		m[r] = i
	}
	return m
}()

// NewRefusals returns the refusals of the listener named listener
// ("grpc", "http", "metrics", "console"), logged to logger.
func NewRefusals(listener string, logger *slog.Logger) *Refusals {
	return &Refusals{listener: listener, logger: logger,
		lastLogged: map[Reason]time.Time{}, suppressed: map[Reason]int{}}
}

// Count returns how many times r happened.
func (rs *Refusals) Count(r Reason) int64 { return rs.counts[reasonIndex[r]].Load() }

// Listener is the name of the listener rs counts for.
func (rs *Refusals) Listener() string { return rs.listener }

// logEvery is how often each kind of refusal is logged at most.
const logEvery = time.Second

// add counts r and logs it, unless r was logged less than logEvery ago.
// The next line says how many went unlogged in between.
func (rs *Refusals) add(r Reason, msg string, attrs ...any) {
	rs.counts[reasonIndex[r]].Add(1)
	now := time.Now()
	rs.mu.Lock()
	if now.Sub(rs.lastLogged[r]) < logEvery {
		rs.suppressed[r]++
		rs.mu.Unlock()
		return
	}
	rs.lastLogged[r] = now
	suppressed := rs.suppressed[r]
	rs.suppressed[r] = 0
	rs.mu.Unlock()
	rs.logger.Warn(msg, append([]any{"listener", rs.listener, "reason", string(r), "unlogged_since_last", suppressed}, attrs...)...)
}
