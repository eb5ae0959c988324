package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	return server(t, func(c net.Conn) { io.Copy(c, c) })
}

// server serves each connection with handle, until the test ends, and
// returns its address.
func server(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dial connects through p and checks that a line makes the round trip.
func dial(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	roundTrip(t, c, r)
	return c, r
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo through the proxy: %q, %v", line, err)
	}
}

// waitBroken waits until c fails, as a client on a cut connection does, and
// returns the first error it saw.
func waitBroken(t *testing.T, c net.Conn, r *bufio.Reader) error {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		_, err := c.Write([]byte("x\n"))
		if err == nil {
			_, err = r.ReadString('\n')
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection was not cut")
			}
			return err
		}
	}
}

func TestCutAll_BreaksLiveConnectionsNewOnesWork(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	roundTrip(t, c, r)

	p.CutAll()
	// A reset, not an orderly close: what a dropped network looks like.
	if err := waitBroken(t, c, r); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after CutAll: %v, want connection reset", err)
	}
	if n := p.Cuts(); n != 1 {
		t.Fatalf("Cuts() = %d, want 1", n)
	}

	c2, r2 := dial(t, p)
	roundTrip(t, c2, r2)
}

func TestCutEvery_CutsThenStops(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	p.CutEvery(5 * time.Millisecond)
	waitBroken(t, c, r)
	p.CutEvery(0)
	if p.Cuts() == 0 {
		t.Fatal("Cuts() = 0 after a cut")
	}

	// Stopped: a new connection lives on.
	c2, r2 := dial(t, p)
	time.Sleep(50 * time.Millisecond)
	roundTrip(t, c2, r2)
}

func TestClose_RefusesNewAndEndsLive(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	p.CutEvery(time.Hour)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waitBroken(t, c, r)
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("dialed a closed proxy")
	}
}

// The connection that sends the pattern is cut once the target has it: the
// target's answer never comes back, and the trigger fires once.
func TestCutWhenClientSends_TargetGetsItClientNoAnswer(t *testing.T) {
	got := make(chan string, 1)
	target := server(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if line == "COMMIT\n" {
				got <- line
				time.Sleep(50 * time.Millisecond) // the answer comes after the cut
			}
			c.Write([]byte(line))
		}
	})
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, r := dial(t, p)
	p.CutWhenClientSends([]byte("COMMIT"))
	roundTrip(t, c, r) // no pattern: not cut
	c.Write([]byte("COMMIT\n"))
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the target did not get the line that holds the pattern")
	}
	if _, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("answer after the pattern: %v, want connection reset", err)
	}
	c2, r2 := dial(t, p) // fired once
	c2.Write([]byte("COMMIT\n"))
	if line, err := r2.ReadString('\n'); err != nil || line != "COMMIT\n" {
		t.Fatalf("a second connection sending the pattern: %q, %v; want its answer", line, err)
	}
}

// A reply of at least the size given is swallowed and its connection cut,
// once the target has had the request; shorter ones pass, and a chance of
// 0 stops the dropping.
func TestDropReplies_TargetAnsweredClientNot(t *testing.T) {
	long := strings.Repeat("a", 1000) + "\n"
	got := make(chan string, 1)
	target := server(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if line == long {
				select {
				case got <- line:
				default:
				}
			}
			c.Write([]byte(line))
		}
	})
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.DropReplies(100, 1)
	c, r := dial(t, p) // a short reply: through
	c.Write([]byte(long))
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the target did not get the request")
	}
	if line, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a long reply: %d bytes, %v; want none, connection reset", len(line), err)
	}
	if n := p.Cuts(); n != 1 {
		t.Fatalf("Cuts() = %d, want 1", n)
	}

	p.DropReplies(100, 0)
	c2, r2 := dial(t, p)
	c2.Write([]byte(long))
	if line, err := r2.ReadString('\n'); err != nil || line != long {
		t.Fatalf("a long reply with dropping stopped: %d bytes, %v; want it whole", len(line), err)
	}
}

// Each connection is cut within its lifetime; with the limit lifted, new
// connections live on.
func TestLimitLifetime_CutsEachConnection(t *testing.T) {
	p := newProxy(t)
	p.LimitLifetime(20 * time.Millisecond)
	for range 3 {
		c, err := net.Dial("tcp", p.Addr())
		if errors.Is(err, syscall.ECONNRESET) {
			continue // a lifetime near 0: cut before Dial saw the connection made
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := waitBroken(t, c, bufio.NewReader(c)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a connection past its lifetime: %v, want connection reset", err)
		}
	}
	if n := p.Cuts(); n != 3 {
		t.Fatalf("Cuts() = %d, want 3", n)
	}

	p.LimitLifetime(0)
	c, r := dial(t, p)
	time.Sleep(50 * time.Millisecond)
	roundTrip(t, c, r)
}
