package connlimit

import (
	"bufio"
	"errors"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
)

// Credentials wraps a gRPC server's transport credentials. It counts and
// logs a failed TLS handshake, and follows each connection's frames, both
// ways, on the far side of TLS.
//
// It times header blocks. A HEADERS frame that does not end its block
// starts a clock. If the block's last CONTINUATION has not arrived within
// headerTimeout, the connection is closed. What the block held is dropped
// with it. The header list limit bounds the bytes of a block. This bounds
// how long a client may hold them.
//
// It tells calls which stream each call is, and when its answer has left
// (see Calls). For that the server must read frames straight from the
// connection: grpc.ReadBufferSize(0). The connection buffers its reads
// itself, and hands gRPC no byte of a frame it has not asked for, so that
// when the server's tap handle runs, the last HEADERS frame read is the
// call's.
func Credentials(inner credentials.TransportCredentials, headerTimeout time.Duration, calls *Calls, refusals *Refusals) credentials.TransportCredentials {
	return &creds{TransportCredentials: inner, timeout: headerTimeout, calls: calls, refusals: refusals}
}

type creds struct {
	credentials.TransportCredentials
	timeout  time.Duration
	calls    *Calls
	refusals *Refusals
}

func (c *creds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	secured, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.refusals.add(Handshake, "tls handshake failed", "remote", raw.RemoteAddr().String(), "err", err.Error())
		return nil, nil, err
	}
	if _, isTCP := raw.RemoteAddr().(*net.TCPAddr); !isTCP { // the HTTP face's in-memory connection
		return secured, info, nil
	}
	sc := &serverConn{Conn: secured, r: bufio.NewReaderSize(secured, readBuffer), timeout: c.timeout, refusals: c.refusals}
	if tracked, ok := raw.(*conn); ok && c.calls != nil {
		sc.answers = c.calls.follow(tracked)
		sc.scan.answers = sc.answers
	}
	return sc, info, nil
}

func (c *creds) Clone() credentials.TransportCredentials {
	return &creds{TransportCredentials: c.TransportCredentials.Clone(), timeout: c.timeout, calls: c.calls, refusals: c.refusals}
}

// readBuffer is the read buffer of a gRPC connection, grpc-go's own
// default.
const readBuffer = 32 << 10

// serverConn is the server's side of an HTTP/2 connection, past TLS. It
// follows the client's frames as gRPC reads them, to time header blocks
// and to see streams open and windows granted, and the server's frames as
// they are written, to see answers leave. Only the reading goroutine
// reads, and only one goroutine at a time writes.
type serverConn struct {
	net.Conn
	r        *bufio.Reader
	timeout  time.Duration
	refusals *Refusals
	scan     frameScanner
	deadline time.Time // when the open header block must be finished
	armed    bool      // whether the read deadline is ours
	answers  *answers  // nil when no Calls follows them
	written  frameReader
}

func (c *serverConn) Read(p []byte) (int, error) {
	switch {
	case c.scan.blockOpen:
		if !c.armed {
			c.armed = true
			c.Conn.SetReadDeadline(c.deadline)
		}
	case c.armed:
		c.armed = false
		c.Conn.SetReadDeadline(time.Time{})
	}
	n, err := c.r.Read(p)
	wasOpen, opens, wasBad := c.scan.blockOpen, c.scan.opens, c.scan.badPreface
	c.scan.scan(p[:n])
	switch {
	case c.scan.badPreface && !wasBad:
		c.refusals.add(Preface, "connection refused: it did not begin with the HTTP/2 preface", "remote", c.RemoteAddr().String())
		return n, errBadPreface
	case c.scan.opens != opens && c.scan.blockOpen:
		c.deadline = time.Now().Add(c.timeout)
		c.armed = false // set at the next read
	case err != nil && wasOpen && errors.Is(err, os.ErrDeadlineExceeded):
		c.refusals.add(HeaderTimeout, "connection closed: a header block stayed unfinished", "remote", c.RemoteAddr().String(), "timeout", c.timeout.String())
	}
	return n, err
}

// Write writes the server's frames, and tells answers of those written.
func (c *serverConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.answers != nil {
		c.written.scan(p[:n], (*serverFrames)(c.answers))
	}
	return n, err
}

func (c *serverConn) Close() error {
	if c.answers != nil {
		c.answers.closed()
	}
	return c.Conn.Close()
}

// serverFrames reads the frames the server wrote for answers.
type serverFrames answers

func (s *serverFrames) frame(h frameHeader) {
	a := (*answers)(s)
	switch {
	case h.typ == frameData:
		a.sent(h.stream, int64(h.length))
		if h.flags&flagEndStream != 0 {
			a.ended(h.stream)
		}
	case h.typ == frameHeaders && h.flags&flagEndStream != 0, h.typ == frameRSTStream:
		a.ended(h.stream)
	}
}

func (s *serverFrames) field(frameHeader, []byte) {}

var errBadPreface = errors.New("connlimit: the connection did not begin with the HTTP/2 preface")

// clientPreface begins every HTTP/2 connection.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameScanner follows the frames of a client's side of an HTTP/2
// connection. It is fed the bytes in pieces of any size. It follows them
// far enough to know whether a header block is open. A HEADERS frame
// without END_HEADERS opens one, and a CONTINUATION frame with END_HEADERS
// closes it. With answers set, it tells them of the streams the client
// opens and resets, and of the flow-control windows it grants.
type frameScanner struct {
	preface    int // bytes of the preface seen
	badPreface bool
	frames     frameReader
	blockOpen  bool
	opens      int // header blocks opened
	answers    *answers
}

func (s *frameScanner) scan(b []byte) {
	if s.preface < len(clientPreface) && !s.badPreface {
		n := min(len(clientPreface)-s.preface, len(b))
		if string(b[:n]) != clientPreface[s.preface:s.preface+n] {
			s.badPreface = true
		}
		s.preface += n
		b = b[n:]
	}
	if !s.badPreface {
		s.frames.scan(b, s)
	}
}

func (s *frameScanner) frame(h frameHeader) {
	switch h.typ {
	case frameHeaders:
		if s.blockOpen = h.flags&flagEndHeaders == 0; s.blockOpen {
			s.opens++
		}
		if s.answers != nil {
			s.answers.opened.Store(h.stream)
		}
	case frameContinuation:
		if h.flags&flagEndHeaders != 0 {
			s.blockOpen = false
		}
	case frameRSTStream:
		if s.answers != nil {
			s.answers.ended(h.stream)
		}
	}
}

func (s *frameScanner) field(h frameHeader, f []byte) {
	switch {
	case s.answers == nil:
	case h.typ == frameWindowUpdate:
		s.answers.granted(h.stream, int64(be32(f)&(1<<31-1)))
	case h.typ == frameSettings && f[0] == 0 && f[1] == settingInitialWindowSize:
		s.answers.initialWindow(int64(be32(f[2:])))
	}
}
