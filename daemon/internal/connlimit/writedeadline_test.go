package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// big is a handler whose answer is far larger than the sockets' buffers.
var big = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/small" {
		io.WriteString(w, "ok")
		return
	}
	w.Write(make([]byte, 64<<20))
})

// serveHTTP serves h behind a Listener of max connections.
func serveHTTP(t *testing.T, max int, h http.Handler) (*Listener, *Refusals) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := refusals()
	l := Limit(inner, max, rs)
	srv := &http.Server{Handler: h, ConnState: l.ConnState}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, rs
}

// slowReader asks for path and reads nothing, its receive buffer small.
func slowReader(t *testing.T, addr, path string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := c.(*net.TCPConn)
	tc.SetReadBuffer(4096)
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path)
	return tc
}

// An answer not written within its bound closes its connection, and is
// counted: a client that does not read holds nothing for long.
func TestWriteDeadline_UnreadAnswerClosesItsConnection(t *testing.T) {
	l, rs := serveHTTP(t, 10, WriteDeadline(big, 300*time.Millisecond))
	slowReader(t, l.Addr().String(), "/big")
	eventually(t, "the write timeout", func() bool { return rs.Count(WriteTimeout) == 1 })
	// What the kernel still holds to send is the kernel's; the server
	// holds nothing of it.
	eventually(t, "the connection to be gone", func() bool { return l.Open() == 0 })
}

// The clock starts at the answer's first byte: a slow handler is not cut
// off.
func TestWriteDeadline_HandlerTimeNotCounted(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "done")
	})
	l, rs := serveHTTP(t, 10, WriteDeadline(slow, 100*time.Millisecond))
	resp, err := http.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "done" || rs.Count(WriteTimeout) != 0 {
		t.Errorf("a handler slower than the write bound: %q, %d write timeouts", body, rs.Count(WriteTimeout))
	}
}

// A connection whose client does not read counts as idle when a new
// connection needs room.
func TestListener_SlowReaderEvictedForANewConnection(t *testing.T) {
	l, rs := serveHTTP(t, 1, WriteDeadline(big, time.Hour))
	slowReader(t, l.Addr().String(), "/big")
	eventually(t, "a write blocked past slowWrite", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.slowest() != nil
	})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a new connection beside a slow reader: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "ok") {
		t.Errorf("body %q", body)
	}
	if got := rs.Count(SlowReaderEvicted); got != 1 {
		t.Errorf("slow_reader_evicted: %d, want 1", got)
	}
}
