package connlimit

import (
	"errors"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
)

// Credentials wraps a gRPC server's transport credentials. It counts and
// logs a failed TLS handshake, and times each connection's header blocks.
// A HEADERS frame that does not end its block starts a clock. If the
// block's last CONTINUATION has not arrived within headerTimeout, the
// connection is closed. What the block held is dropped with it. The header
// list limit bounds the bytes of a block. This bounds how long a client
// may hold them.
func Credentials(inner credentials.TransportCredentials, headerTimeout time.Duration, refusals *Refusals) credentials.TransportCredentials {
	return &creds{TransportCredentials: inner, timeout: headerTimeout, refusals: refusals}
}

type creds struct {
	credentials.TransportCredentials
	timeout  time.Duration
	refusals *Refusals
}

func (c *creds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.refusals.add(Handshake, "tls handshake failed", "remote", raw.RemoteAddr().String(), "err", err.Error())
		return nil, nil, err
	}
	if _, isTCP := raw.RemoteAddr().(*net.TCPAddr); !isTCP { // the HTTP face's in-memory connection
		return conn, info, nil
	}
	return &timedConn{Conn: conn, timeout: c.timeout, refusals: c.refusals}, info, nil
}

func (c *creds) Clone() credentials.TransportCredentials {
	return &creds{TransportCredentials: c.TransportCredentials.Clone(), timeout: c.timeout, refusals: c.refusals}
}

// timedConn reads a server's side of an HTTP/2 connection, following its
// frames to time its header blocks. Only the reading goroutine uses it.
type timedConn struct {
	net.Conn
	timeout  time.Duration
	refusals *Refusals
	scan     frameScanner
	deadline time.Time // when the open header block must be finished
	armed    bool      // whether the read deadline is ours
}

func (c *timedConn) Read(p []byte) (int, error) {
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
	n, err := c.Conn.Read(p)
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

var errBadPreface = errors.New("connlimit: the connection did not begin with the HTTP/2 preface")

// clientPreface begins every HTTP/2 connection.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameScanner follows the frames of a client's side of an HTTP/2
// connection. It is fed the bytes in pieces of any size. It follows them
// far enough to know whether a header block is open. A HEADERS frame
// without END_HEADERS opens one, and a CONTINUATION frame with END_HEADERS
// closes it.
type frameScanner struct {
	preface    int // bytes of the preface seen
	badPreface bool
	header     [9]byte
	headerLen  int    // bytes of the current frame header seen
	skip       uint32 // payload bytes of the current frame still to come
	blockOpen  bool
	opens      int // header blocks opened
}

const (
	frameHeaders      = 0x1
	frameContinuation = 0x9
	flagEndHeaders    = 0x4
)

func (s *frameScanner) scan(b []byte) {
	for len(b) > 0 && !s.badPreface {
		if s.preface < len(clientPreface) {
			n := min(len(clientPreface)-s.preface, len(b))
			if string(b[:n]) != clientPreface[s.preface:s.preface+n] {
				s.badPreface = true
				return
			}
			s.preface += n
			b = b[n:]
			continue
		}
		if s.skip > 0 {
			n := min(s.skip, uint32(len(b)))
			s.skip -= n
			b = b[n:]
			continue
		}
		n := copy(s.header[s.headerLen:], b)
		s.headerLen += n
		b = b[n:]
		if s.headerLen < len(s.header) {
			return
		}
		s.headerLen = 0
		s.skip = uint32(s.header[0])<<16 | uint32(s.header[1])<<8 | uint32(s.header[2])
		switch typ, flags := s.header[3], s.header[4]; typ {
		case frameHeaders:
			if s.blockOpen = flags&flagEndHeaders == 0; s.blockOpen {
				s.opens++
			}
		case frameContinuation:
			if flags&flagEndHeaders != 0 {
				s.blockOpen = false
			}
		}
	}
}
