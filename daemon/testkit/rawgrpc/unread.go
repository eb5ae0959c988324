package rawgrpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Unreader is a client that calls and does not read the answers: it
// grants the server no flow-control window (SETTINGS_INITIAL_WINDOW_SIZE
// 0) and sends no WINDOW_UPDATE until told to. It answers PINGs and
// SETTINGS, so to the server it looks alive. Each answer then waits in
// the server's memory.
type Unreader struct {
	conn    net.Conn
	fr      *http2.Framer
	wmu     sync.Mutex // guards writes
	next    uint32     // the next stream to open
	streams []uint32
	closed  chan struct{}
	quit    chan struct{} // closed by Close
	noRead  atomic.Bool   // stop reading the connection at all
	resets  atomic.Int64  // streams the server reset (refused among them)
	ended   atomic.Int64  // streams the server ended with END_STREAM
}

// Unread connects to addr (TLS when tlsConfig is set) with a window of 0.
func Unread(ctx context.Context, addr string, tlsConfig *tls.Config) (*Unreader, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsConfig != nil {
		cfg := tlsConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	u := &Unreader{conn: conn, fr: http2.NewFramer(conn, conn), next: 1, closed: make(chan struct{}), quit: make(chan struct{})}
	u.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	u.fr.MaxHeaderListSize = 1 << 20
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		conn.Close()
		return nil, err
	}
	if err := u.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		conn.Close()
		return nil, err
	}
	go u.read()
	return u, nil
}

// Call opens a stream and sends a whole unary call on it.
func (u *Unreader) Call(fields []Field, message []byte) error {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	msg := make([]byte, 5+len(message))
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(message)))
	copy(msg[5:], message)
	u.wmu.Lock()
	defer u.wmu.Unlock()
	stream := u.next
	u.next += 2
	u.streams = append(u.streams, stream)
	if err := u.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return u.fr.WriteData(stream, true, msg)
}

// GrantStreams sets the initial window of every stream, those open and
// those to come, to n.
func (u *Unreader) GrantStreams(n uint32) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	return u.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: n})
}

// GrantConnection raises the connection's window by n.
func (u *Unreader) GrantConnection(n uint32) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	return u.fr.WriteWindowUpdate(0, n)
}

// Grant opens every window wide: the answers may now leave.
func (u *Unreader) Grant() error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	if err := u.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		return err
	}
	for _, s := range u.streams {
		if err := u.fr.WriteWindowUpdate(s, 1<<30); err != nil {
			return err
		}
	}
	return nil
}

// GrantCall opens the windows of the i-th call alone (from 0), and the
// connection's: that answer may now leave.
func (u *Unreader) GrantCall(i int) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	if err := u.fr.WriteWindowUpdate(0, 1<<20); err != nil {
		return err
	}
	return u.fr.WriteWindowUpdate(u.streams[i], 1<<20)
}

// Closed is closed once the server has closed the connection.
func (u *Unreader) Closed() <-chan struct{} { return u.closed }

// Ended is how many streams the server ended (END_STREAM) and reset.
func (u *Unreader) Ended() (ended, reset int64) { return u.ended.Load(), u.resets.Load() }

// StopReading stops reading the connection at all, after the frame being
// read: once the sockets' buffers are full, the server's writes block,
// whatever windows were granted.
func (u *Unreader) StopReading() { u.noRead.Store(true) }

// Close closes the connection.
func (u *Unreader) Close() error {
	select {
	case <-u.quit:
	default:
		close(u.quit)
	}
	return u.conn.Close()
}

// read answers the connection's SETTINGS and PINGs, and counts what the
// server sends, until the connection ends.
func (u *Unreader) read() {
	defer close(u.closed)
	for {
		if u.noRead.Load() {
			<-u.quit
			return
		}
		f, err := u.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				u.write(func() error { return u.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				u.write(func() error { return u.fr.WritePing(true, data) })
			}
		case *http2.RSTStreamFrame:
			u.resets.Add(1)
		case *http2.DataFrame:
			if f.StreamEnded() {
				u.ended.Add(1)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				u.ended.Add(1)
			}
		}
	}
}

func (u *Unreader) write(f func() error) {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	f()
}
