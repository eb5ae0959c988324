package connlimit

import (
	"container/list"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Calls bounds the gRPC calls in progress on a server, across all its
// connections. MaxConcurrentStreams bounds one connection's calls, not how
// many connections multiply it. Its Tap is the server's tap handle
// (grpc.InTapHandle). The tap handle sees each call as its headers arrive,
// before its request is read or its caller authenticated.
//
// A call is in progress from its headers until its answer has left: its
// status written to the connection, or the stream reset, or the
// connection closed. A handler that has returned does not end it, as its
// answer may still wait, in the server's memory, for a client that does
// not read. (Calls on connections it does not follow, such as the HTTP
// face's in memory, end when their handlers return.)
//
// An answer that waits on its client, for a window it does not grant or
// for it to read what was written, holds a slot the client does not use.
// So does a call that has sent its headers but not its request. When
// every slot is taken, a new call closes the connection of the oldest
// answer stuck so for a second, or else cancels the oldest call of the
// second kind, to make room. So answers left unread, and streams opened
// and left waiting, cannot lock out a client that calls. Only when
// neither exists is the new one refused.
//
// The bytes of answers not yet written are bounded too, on each
// connection and in all (see Unread).
type Calls struct {
	max      int
	unread   Unread
	lis      *Listener // the gRPC listener, told which connections are busy
	refusals *Refusals
	unsent   atomic.Int64 // bytes of answers not yet written, in all

	maxAnon       int      // slots for calls that need no credential; 0: no bound apart
	authenticated []string // prefixes of the methods that need one

	mu         sync.Mutex
	active     int
	anonActive int       // of active, the calls that need no credential
	waiting    list.List // of *call not yet handled, oldest first
	leaving    list.List // of *call handled whose answers have not left, oldest first
	conns      map[*answers]bool
}

// Unread bounds the bytes of answers written by handlers and not yet
// written to their connections: those their clients have not read.
type Unread struct {
	// PerConnection is what one connection may hold. Past it, its new
	// calls are refused with RESOURCE_EXHAUSTED, and if it still holds
	// more after Grace, it is closed.
	PerConnection int64
	Grace         time.Duration
	// Total is what all connections may hold. Past it, the connection
	// holding most is closed.
	Total int64
}

// call is one admitted call.
type call struct {
	cancel    context.CancelCauseFunc
	end       func()    // tells the listener the call is over
	answers   *answers  // its connection's; nil when not followed
	admitted  time.Time // when the tap admitted it
	anonymous bool      // its method needs no credential

	// Guarded by Calls.mu.
	waiting  *list.Element // while not yet handled
	leaving  *list.Element // while handled, its answer not yet left
	evicted  bool          // its slot went to a newer call
	done     bool          // its stream's context ended: the handler is done
	doneAt   time.Time     // when the handler was done
	left     bool          // its answer has left, or never will
	released bool          // its slot is free

	// Guarded by answers.mu.
	stream uint32
	credit int64 // the client's updates to the stream's window, less what was sent
	unsent int64 // bytes of its answer produced and not yet written
}

// errEvicted ends a call whose slot a newer call took.
var errEvicted = errors.New("connlimit: call cancelled to make room for a newer one")

type callKey struct{}

// NewCalls returns a bound of max calls in progress, and of the bytes of
// their answers unread. It tells lis of each call on its connections.
func NewCalls(max int, unread Unread, lis *Listener, refusals *Refusals) *Calls {
	return &Calls{max: max, unread: unread, lis: lis, refusals: refusals, conns: map[*answers]bool{}}
}

// Active is the number of calls in progress.
func (c *Calls) Active() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.active)
}

// Leaving is the number of calls whose handlers are done and whose
// answers have not yet left.
func (c *Calls) Leaving() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.leaving.Len())
}

// Unsent is the bytes of answers not yet written, on every connection.
func (c *Calls) Unsent() int64 { return c.unsent.Load() }

// Max is the most calls in progress at once.
func (c *Calls) Max() int64 { return int64(c.max) }

// Bounds is the bounds of unread answers.
func (c *Calls) Bounds() Unread { return c.unread }

// Tap admits a call, making room if it must. When no room can be made,
// for the call or for the calls that need no credential, it refuses the
// new one with UNAVAILABLE. Nothing ran, so the client may retry it, with
// the same key or without one. A call on a connection holding more
// unread answers than its bound is refused with RESOURCE_EXHAUSTED: its
// client should read them first.
func (c *Calls) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	end, a := func() {}, (*answers)(nil)
	if p, ok := peer.FromContext(ctx); ok && c.lis != nil {
		end, a = c.lis.begin(p.Addr.String())
	}
	if a != nil && a.unsent.Load() > c.unread.PerConnection {
		end()
		c.refusals.add(UnreadRefused, "call refused: its connection holds more unread answers than its bound", "remote", a.conn.key, "unread_bytes", a.unsent.Load())
		return nil, status.Errorf(codes.ResourceExhausted, "this connection holds %d bytes of answers its client has not read, over the bound of %d; read them first", a.unsent.Load(), c.unread.PerConnection)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	cl := &call{cancel: cancel, end: end, answers: a, admitted: time.Now(), anonymous: c.isAnonymous(info)}
	c.mu.Lock()
	if err := c.admitLocked(cl); err != nil {
		c.mu.Unlock()
		cancel(nil)
		end()
		return nil, err
	}
	cl.waiting = c.waiting.PushBack(cl)
	c.active++
	if cl.anonymous {
		c.anonActive++
	}
	if a == nil || !a.open(cl) {
		cl.left = true
	}
	c.mu.Unlock()
	// The stream's context ends when its handler is done, or the stream
	// or its connection is.
	context.AfterFunc(ctx, func() { c.handlerDone(cl) })
	return context.WithValue(ctx, callKey{}, cl), nil
}

// admitLocked makes room for cl, or says why there is none.
func (c *Calls) admitLocked(cl *call) error {
	anonymousFull := func() bool { return c.anonActive >= c.maxAnon }
	if cl.anonymous && anonymousFull() && !c.makeRoomLocked(func(o *call) bool { return o.anonymous }, anonymousFull) {
		c.refusals.add(AnonymousLimit, "call refused: as many calls without a credential are in progress as may be", "max_anonymous_calls", c.maxAnon)
		return status.Errorf(codes.Unavailable, "the server is handling its limit of %d calls that need no credential; retry later", c.maxAnon)
	}
	full := func() bool { return c.active >= c.max }
	if full() && !c.makeRoomLocked(func(*call) bool { return true }, full) {
		c.refusals.add(CallLimit, "call refused: the server is handling as many calls as it may", "max_calls", c.max)
		return status.Errorf(codes.Unavailable, "the server is handling its limit of %d calls; retry later", c.max)
	}
	return nil
}

// isAnonymous reports whether the call info describes answers without a
// credential, and is bounded apart (see Anonymous).
func (c *Calls) isAnonymous(info *tap.Info) bool {
	if c.maxAnon == 0 || info == nil {
		return false
	}
	for _, p := range c.authenticated {
		if strings.HasPrefix(info.FullMethodName, p) {
			return false
		}
	}
	return true
}

// Anonymous bounds apart the calls to methods outside authenticated
// (prefixes of full method names), which answer without a credential:
// health checks and reflection. At most max hold a slot at once, so that
// strangers cannot take every slot from customers, nor the server's
// time. Call it before serving.
func (c *Calls) Anonymous(max int, authenticated ...string) {
	c.maxAnon, c.authenticated = max, authenticated
}

// settle is how long a call's request has to arrive before the call may
// be cancelled to make room. A request sent with its headers arrives in
// far less; one that has not arrived by then was never sent.
const settle = 100 * time.Millisecond

// stuck is how long an answer must have waited for its client before its
// connection may be closed to make room. A client that reads has its
// window at zero for a round trip at a time, not for a second.
const stuck = time.Second

// makeRoomLocked frees a slot. It closes the connection of the oldest
// answer stuck on its client: waiting, for a second or more, for a window
// the client does not grant or for the client to read what was written.
// That client does not read, and closing its connection frees all it
// holds. Failing one, it cancels the oldest call whose request has not
// arrived within settle. It reports false when neither exists.
func (c *Calls) makeRoomLocked(eligible func(*call) bool, full func() bool) bool {
	for e := c.leaving.Front(); e != nil; {
		cl, next := e.Value.(*call), e.Next()
		if eligible(cl) && time.Since(cl.doneAt) >= stuck && cl.answers.blocked(cl) {
			c.closeLocked(cl.answers, AnswerEvicted, "connection closed: its client does not read its answers, and a new call needed the slot")
			if !full() {
				return true
			}
			next = c.leaving.Front() // closing removed others of the list
		}
		e = next
	}
	for e := c.waiting.Front(); e != nil && time.Since(e.Value.(*call).admitted) >= settle; e = e.Next() {
		victim := e.Value.(*call)
		if !eligible(victim) {
			continue
		}
		victim.evicted = true
		c.releaseLocked(victim)
		c.refusals.add(CallEvicted, "call cancelled before its request arrived, to make room for a new one", "max_calls", c.max)
		victim.cancel(errEvicted)
		return true
	}
	return false
}

// closeLocked closes a's connection, and frees the slots of its calls
// whose handlers are done. The rest are freed as their handlers end.
func (c *Calls) closeLocked(a *answers, r Reason, msg string) {
	unsent := a.unsent.Load()
	for _, cl := range a.end() {
		cl.left = true
		if cl.done {
			c.releaseLocked(cl)
		}
	}
	delete(c.conns, a)
	// Counted before the close, so that whoever sees the close also sees
	// it counted.
	c.refusals.add(r, msg, "remote", a.conn.key, "unread_bytes", unsent)
	// Not under the lock: a close waits for the writes in progress.
	go a.conn.Conn.Close()
}

// releaseLocked frees cl's slot.
func (c *Calls) releaseLocked(cl *call) {
	if cl.released {
		return
	}
	cl.released = true
	c.active--
	if cl.anonymous {
		c.anonActive--
	}
	if cl.waiting != nil {
		c.waiting.Remove(cl.waiting)
		cl.waiting = nil
	}
	if cl.leaving != nil {
		c.leaving.Remove(cl.leaving)
		cl.leaving = nil
	}
	cl.end()
}

// handlerDone is cl's stream context ended. Its slot is free once its
// answer has left too.
func (c *Calls) handlerDone(cl *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.done, cl.doneAt = true, time.Now()
	switch {
	case cl.released:
	case cl.left:
		c.releaseLocked(cl)
	default:
		if cl.waiting != nil {
			c.waiting.Remove(cl.waiting)
			cl.waiting = nil
		}
		cl.leaving = c.leaving.PushBack(cl)
	}
}

// answerLeft is cl's answer written, or dropped with its stream.
func (c *Calls) answerLeft(cl *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.left = true
	if cl.done {
		c.releaseLocked(cl)
	}
}

// closeFlowError closes a's connection: its client broke flow control.
func (c *Calls) closeFlowError(a *answers) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns[a] {
		c.closeLocked(a, FlowControl, "connection closed: its client raised a flow-control window past 2^31-1")
	}
}

// forget drops a closed connection.
func (c *Calls) forget(a *answers) {
	c.mu.Lock()
	delete(c.conns, a)
	c.mu.Unlock()
}

// checkUnread enforces the bounds on unread answers after a's grew.
func (c *Calls) checkUnread(a *answers) {
	if a.unsent.Load() > c.unread.PerConnection {
		a.startGrace(c.unread.Grace, func() {
			if a.unsent.Load() > c.unread.PerConnection {
				c.mu.Lock()
				c.closeLocked(a, UnreadClosed, "connection closed: it held more unread answers than its bound past the grace")
				c.mu.Unlock()
			}
		})
	}
	if c.unsent.Load() <= c.unread.Total {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The connection holding most of the answers stuck on their clients;
	// failing one, the one holding most.
	var most *answers
	mostStuck := false
	for o := range c.conns {
		isStuck := o.stuck()
		if most == nil || isStuck && !mostStuck || isStuck == mostStuck && o.unsent.Load() > most.unsent.Load() {
			most, mostStuck = o, isStuck
		}
	}
	if most != nil && c.unsent.Load() > c.unread.Total {
		c.closeLocked(most, UnreadClosed, "connection closed: the server holds more unread answers than its bound, this connection most")
	}
}

// Handled marks the call of ctx as being handled. Its request has arrived,
// so it is no longer cancelled to make room. The server's first unary
// interceptor calls it. Streaming calls stay evictable: a stream such as
// a health Watch may last as long as its client likes.
func (c *Calls) Handled(ctx context.Context) {
	cl, _ := ctx.Value(callKey{}).(*call)
	if cl == nil {
		return
	}
	c.mu.Lock()
	if cl.waiting != nil {
		c.waiting.Remove(cl.waiting)
		cl.waiting = nil
	}
	c.mu.Unlock()
}

// UnaryServerInterceptor calls Handled. It must come first in the chain.
// A call cancelled to make room before it got here is answered
// UNAVAILABLE: nothing ran, and a retry is safe.
func (c *Calls) UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.Handled(ctx)
	if context.Cause(ctx) == errEvicted {
		return nil, status.Error(codes.Unavailable, "the call was cancelled before its request arrived, to make room for others; nothing ran, retry")
	}
	return handler(ctx, req)
}

// StatsHandler is the server's stats handler (grpc.StatsHandler) that
// counts the bytes of each answer as the transport takes them.
func (c *Calls) StatsHandler() stats.Handler { return unsentCounter{c} }

type unsentCounter struct{ c *Calls }

func (u unsentCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok {
		if cl, _ := ctx.Value(callKey{}).(*call); cl != nil && cl.answers != nil {
			cl.answers.produced(cl, int64(p.WireLength))
			u.c.checkUnread(cl.answers)
		}
	}
}

func (unsentCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (unsentCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (unsentCounter) HandleConn(context.Context, stats.ConnStats)                       {}
