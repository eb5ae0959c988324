package connlimit

import (
	"container/list"
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Calls bounds the gRPC calls in progress on a server, across all its
// connections. MaxConcurrentStreams bounds one connection's calls, not how
// many connections multiply it. Its Tap is the server's tap handle
// (grpc.InTapHandle). The tap handle sees each call as its headers arrive,
// before its request is read or its caller authenticated.
//
// A call that has sent its headers but not yet its request holds a slot
// without having asked for anything. When every slot is taken, a new call
// cancels the oldest such call to make room. So streams opened and left
// waiting cannot lock out a client that calls. Only when every call is
// being handled is the new one refused.
type Calls struct {
	max      int
	lis      *Listener // the gRPC listener, told which connections are busy
	refusals *Refusals

	mu      sync.Mutex
	active  int
	waiting list.List // of *call not yet handled, oldest first
}

// call is one admitted call; its fields are guarded by Calls.mu.
type call struct {
	cancel  context.CancelCauseFunc
	waiting *list.Element // nil once handled or evicted
	evicted bool          // its slot went to a newer call
}

// errEvicted ends a call whose slot a newer call took.
var errEvicted = errors.New("connlimit: call cancelled to make room for a newer one")

type callKey struct{}

// NewCalls returns a bound of max calls in progress. It tells lis of each
// call on its connections.
func NewCalls(max int, lis *Listener, refusals *Refusals) *Calls {
	return &Calls{max: max, lis: lis, refusals: refusals}
}

// Active is the number of calls in progress.
func (c *Calls) Active() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.active)
}

// Max is the most calls in progress at once.
func (c *Calls) Max() int64 { return int64(c.max) }

// Tap admits a call, making room if it must by cancelling the oldest call
// not yet handled. When every call is being handled, it refuses the new
// one with UNAVAILABLE. Nothing ran, so the client may retry it, with the
// same key or without one. The call counts until its stream ends.
func (c *Calls) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	c.mu.Lock()
	var victim *call
	if c.active >= c.max {
		oldest := c.waiting.Front()
		if oldest == nil {
			c.mu.Unlock()
			c.refusals.add(CallLimit, "call refused: the server is handling as many calls as it may", "max_calls", c.max)
			return nil, status.Errorf(codes.Unavailable, "the server is handling its limit of %d calls; retry later", c.max)
		}
		victim = c.waiting.Remove(oldest).(*call)
		victim.waiting, victim.evicted = nil, true
		c.active--
	}
	ctx, cancel := context.WithCancelCause(ctx)
	cl := &call{cancel: cancel}
	cl.waiting = c.waiting.PushBack(cl)
	c.active++
	c.mu.Unlock()

	if victim != nil {
		victim.cancel(errEvicted)
		c.refusals.add(CallEvicted, "call cancelled before its request arrived, to make room for a new one", "max_calls", c.max)
	}
	end := func() {}
	if p, ok := peer.FromContext(ctx); ok && c.lis != nil {
		end = c.lis.begin(p.Addr.String())
	}
	// The stream's context ends with the stream, whichever way it ends.
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		if !cl.evicted {
			c.active--
			if cl.waiting != nil {
				c.waiting.Remove(cl.waiting)
			}
		}
		c.mu.Unlock()
		end()
	})
	return context.WithValue(ctx, callKey{}, cl), nil
}

// Handled marks the call of ctx as being handled. Its request has arrived,
// so it is no longer cancelled to make room. The server's first unary
// interceptor calls it. Streaming calls stay evictable.
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
func (c *Calls) UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.Handled(ctx)
	return handler(ctx, req)
}
