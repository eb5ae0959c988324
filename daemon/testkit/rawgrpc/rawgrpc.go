// Package rawgrpc is a test kit: a gRPC client small enough to send any
// bytes in its header fields. It speaks HTTP/2 itself with x/net/http2's
// Framer and hpack encoder. It sends the fields in the order given,
// repeated names and all, with no validation. It reports what the server
// answered, down to a refused stream (RST_STREAM) or connection (GOAWAY).
// A gRPC client library would check or canonicalize the fields before
// sending.
package rawgrpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// Field is one header field, sent as it is.
type Field struct{ Name, Value string }

// Fields returns the fields of a plain unary gRPC call to path on
// authority, followed by extra. A path reads "/package.Service/Method".
func Fields(authority, path string, extra ...Field) []Field {
	return append([]Field{
		{":method", "POST"},
		{":scheme", "http"},
		{":path", path},
		{":authority", authority},
		{"content-type", "application/grpc"},
		{"te", "trailers"},
	}, extra...)
}

// Response is what the server answered to a call that it did not refuse.
type Response struct {
	Status  int     // the HTTP :status
	Header  []Field // the first HEADERS frame's fields, in order
	Trailer []Field // the trailers' fields, in order (all of them for a trailers-only answer)
	Code    codes.Code
	Message string // grpc-message, percent-decoded
	Body    []byte // the response message, without its length prefix
}

// Call sends one unary call. Fields go as the request's HEADERS, then
// message as one length-prefixed gRPC message that ends the stream. It
// connects to addr over TCP, with TLS (ALPN h2) when tlsConfig is set.
// Otherwise it speaks plaintext HTTP/2 by prior knowledge. A stream the
// server resets comes back as an http2.StreamError. A connection it closes
// with GOAWAY comes back as a GoAwayError. ctx bounds the whole exchange.
func Call(ctx context.Context, addr string, tlsConfig *tls.Config, fields []Field, message []byte) (*Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if tlsConfig != nil {
		cfg := tlsConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		conn = tc
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return nil, err
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	if err := fr.WriteSettings(); err != nil {
		return nil, err
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	const stream = 1
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		return nil, err
	}
	msg := make([]byte, 5+len(message))
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(message)))
	copy(msg[5:], message)
	if err := fr.WriteData(stream, true, msg); err != nil {
		return nil, err
	}
	return readResponse(fr, stream)
}

// readResponse reads frames until the stream ends. On the way it answers
// what the connection needs: SETTINGS acks, PINGs, flow control.
func readResponse(fr *http2.Framer, stream uint32) (*Response, error) {
	rd := &streamReader{fr: fr, stream: stream, r: &Response{}}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		ended, err := rd.frame(f)
		if err != nil {
			return nil, err
		}
		if ended {
			return rd.r.finish(rd.body)
		}
	}
}

// streamReader gathers the answer on one stream, one frame read at a time.
type streamReader struct {
	fr          *http2.Framer
	stream      uint32
	r           *Response
	body        []byte
	headersSeen bool
}

// frame takes in f, a frame of any stream. It answers the connection's
// frames, and keeps the stream's headers and data. A refusal of the stream
// or the connection becomes an error. ended says the stream ended.
func (rd *streamReader) frame(f http2.Frame) (ended bool, err error) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			return false, rd.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			return false, rd.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		if f.LastStreamID < rd.stream || f.ErrCode != http2.ErrCodeNo {
			return false, GoAwayError{LastStreamID: f.LastStreamID, ErrCode: f.ErrCode, DebugData: string(f.DebugData())}
		}
	case *http2.RSTStreamFrame:
		if f.StreamID == rd.stream {
			return false, http2.StreamError{StreamID: rd.stream, Code: f.ErrCode}
		}
	case *http2.MetaHeadersFrame:
		if f.StreamID == rd.stream {
			rd.headers(f)
			return f.StreamEnded(), nil
		}
	case *http2.DataFrame:
		if f.StreamID == rd.stream {
			rd.data(f)
			return f.StreamEnded(), nil
		}
	}
	return false, nil
}

// headers keeps the fields of a HEADERS frame of the stream. The first
// frame holds the response's headers and :status, any later its trailers.
func (rd *streamReader) headers(f *http2.MetaHeadersFrame) {
	fs := make([]Field, 0, len(f.Fields))
	for _, hf := range f.Fields {
		fs = append(fs, Field{hf.Name, hf.Value})
	}
	if !rd.headersSeen {
		rd.headersSeen = true
		rd.r.Header = fs
		rd.r.Status, _ = strconv.Atoi(f.PseudoValue("status"))
	} else {
		rd.r.Trailer = fs
	}
}

// data keeps a DATA frame's bytes. It gives their flow-control window back
// at once, on the connection and the stream. A response of any length then
// arrives.
func (rd *streamReader) data(f *http2.DataFrame) {
	rd.body = append(rd.body, f.Data()...)
	if n := uint32(len(f.Data())); n > 0 {
		rd.fr.WriteWindowUpdate(0, n)
		rd.fr.WriteWindowUpdate(rd.stream, n)
	}
}

// GoAwayError is Call's error when the server closed the connection with
// a GOAWAY frame before answering. Either the call's stream is past
// LastStreamID, or ErrCode is not NO_ERROR. It is the kit's own. x/net's
// http2.GoAwayError has the same fields, but is deprecated with its
// Transport; this kit uses only the Framer.
type GoAwayError struct {
	LastStreamID uint32
	ErrCode      http2.ErrCode
	DebugData    string
}

func (e GoAwayError) Error() string {
	return fmt.Sprintf("rawgrpc: server sent GOAWAY; LastStreamID=%v, ErrCode=%v, debug=%q",
		e.LastStreamID, e.ErrCode, e.DebugData)
}

// finish fills in the gRPC status from the trailers, and the message from
// body. A trailers-only answer has its status in the headers.
func (r *Response) finish(body []byte) (*Response, error) {
	trailer := r.Trailer
	if trailer == nil {
		trailer = r.Header
	}
	r.Code = codes.Unknown
	for _, f := range trailer {
		switch f.Name {
		case "grpc-status":
			n, err := strconv.ParseUint(f.Value, 10, 32)
			if err != nil {
				return r, fmt.Errorf("grpc-status %q", f.Value)
			}
			r.Code = codes.Code(n)
		case "grpc-message":
			m, err := url.PathUnescape(f.Value)
			if err != nil {
				m = f.Value
			}
			r.Message = m
		}
	}
	switch {
	case len(body) == 0:
	case len(body) < 5:
		return r, errors.New("response message shorter than its prefix")
	default:
		n := binary.BigEndian.Uint32(body[1:5])
		if uint64(n) != uint64(len(body)-5) {
			return r, fmt.Errorf("response message prefix says %d bytes, got %d", n, len(body)-5)
		}
		r.Body = body[5:]
	}
	return r, nil
}

// Get returns the value of the first field named name, and whether there
// is one.
func Get(fields []Field, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}
