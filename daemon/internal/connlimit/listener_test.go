package connlimit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func refusals() *Refusals { return NewRefusals("test", slog.New(slog.DiscardHandler)) }

// server is a Listener and what it accepts, in order.
type server struct {
	*Listener
	accepted chan net.Conn
}

// dial opens a connection to s and returns the client's side.
func (s server) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next connection s accepted.
func (s server) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.accepted:
		return c
	case <-time.After(2 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// closedByServer says whether the server has closed c.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

func listen(t *testing.T, n int) (server, *Refusals) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := refusals()
	s := server{Limit(inner, n, rs), make(chan net.Conn, 10)}
	t.Cleanup(func() { s.Close() })
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			s.accepted <- c
		}
	}()
	return s, rs
}

func TestListener_FullOfIdle_ClosesTheOldestForANewOne(t *testing.T) {
	l, rs := listen(t, 2)
	first := l.dial(t)
	l.next(t)
	time.Sleep(10 * time.Millisecond)
	l.dial(t)
	l.next(t)
	l.dial(t)
	third := l.next(t)
	if !closedByServer(first) {
		t.Fatal("the oldest idle connection is still open")
	}
	if got := rs.Count(IdleEvicted); got != 1 {
		t.Errorf("idle evictions %d, want 1", got)
	}
	if got := l.Open(); got != 2 {
		t.Errorf("open %d, want 2", got)
	}
	third.Close()
	if got := l.Open(); got != 1 {
		t.Errorf("open after a close %d, want 1", got)
	}
}

func TestListener_FullOfBusy_RefusesUntilOneIsIdle(t *testing.T) {
	l, rs := listen(t, 1)
	l.dial(t)
	busy := l.next(t)
	end, _ := l.begin(busy.RemoteAddr().String())

	refused := l.dial(t)
	if !closedByServer(refused) {
		t.Fatal("a connection beyond the limit was kept while the other is busy")
	}
	if got := rs.Count(ConnectionLimit); got != 1 {
		t.Errorf("connection refusals %d, want 1", got)
	}

	end()
	l.dial(t)
	l.next(t)
	if got := rs.Count(IdleEvicted); got != 1 {
		t.Errorf("idle evictions %d, want 1", got)
	}
}

func TestListener_HTTPRequestInProgressIsBusy(t *testing.T) {
	l, rs := listen(t, 1)
	l.dial(t)
	c := l.next(t)
	l.ConnState(c, http.StateActive)
	refused := l.dial(t)
	if !closedByServer(refused) || rs.Count(ConnectionLimit) != 1 {
		t.Fatal("a connection serving a request was closed for a new one")
	}
	l.ConnState(c, http.StateIdle)
	l.dial(t)
	l.next(t)
	if rs.Count(IdleEvicted) != 1 {
		t.Fatal("a connection between requests was not closed for a new one")
	}
}

func TestCalls_FullOfWaiting_CancelsTheOldestForANewOne(t *testing.T) {
	rs := refusals()
	c := NewCalls(2, unread, nil, rs)
	tap := func() (context.Context, context.CancelFunc) {
		parent, end := context.WithCancel(context.Background())
		ctx, err := c.Tap(parent, nil)
		if err != nil {
			t.Fatalf("tap: %v", err)
		}
		return ctx, end
	}
	oldest, _ := tap()
	second, _ := tap()
	// A call is cancelled only once its request has had time to come.
	if _, err := c.Tap(context.Background(), nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call while the waiting ones are fresh: %v, want UNAVAILABLE", err)
	}
	time.Sleep(settle)
	third, _ := tap()
	if context.Cause(oldest) != errEvicted {
		t.Fatalf("the oldest waiting call: %v, want evicted", context.Cause(oldest))
	}
	if second.Err() != nil || third.Err() != nil {
		t.Fatal("a newer call was cancelled")
	}
	if got := rs.Count(CallEvicted); got != 1 {
		t.Errorf("evictions %d, want 1", got)
	}

	// Handled calls are never cancelled: with both slots handled, a new
	// call is refused, UNAVAILABLE.
	c.Handled(second)
	c.Handled(third)
	if _, err := c.Tap(context.Background(), nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call beyond handled ones: %v, want UNAVAILABLE", err)
	}
	if got := rs.Count(CallLimit); got != 2 {
		t.Errorf("refusals %d, want 2", got)
	}
	if got := c.Active(); got != 2 {
		t.Errorf("active %d, want 2", got)
	}
}

func TestCalls_EndedCallFreesItsSlot(t *testing.T) {
	c := NewCalls(1, unread, nil, refusals())
	parent, end := context.WithCancel(context.Background())
	ctx, err := c.Tap(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Handled(ctx)
	end()
	deadline := time.Now().Add(2 * time.Second)
	for c.Active() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the release runs in its own goroutine
	}
	if got := c.Active(); got != 0 {
		t.Fatalf("active %d after the call ended, want 0", got)
	}
	if _, err := c.Tap(context.Background(), nil); err != nil {
		t.Fatalf("a call after the slot freed: %v", err)
	}
}

// unread is the bounds of unread answers the tests use where they do not
// test them.
var unread = Unread{PerConnection: 4 << 20, Grace: 10 * time.Second, Total: 64 << 20}
