package httpapi

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/internal/connlimit"
)

// Face is the API served on an address of its own, in front of a gRPC
// server. It is bound first, so that a bad address is refused before
// anything is opened. It is served once the gRPC server is ready.
type Face struct {
	lis     net.Listener
	conn    *grpc.ClientConn // to the gRPC server, in memory
	server  *http.Server     // nil until Start
	observe Observe
	// connState, if set, is told of each connection's state.
	connState func(net.Conn, http.ConnState)
	// writeTimeout, if set, bounds how long an answer takes to write.
	writeTimeout time.Duration
}

// Listen binds addr for the API.
func Listen(addr string) (*Face, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	return &Face{lis: lis}, nil
}

// Addr is the address f is bound to.
func (f *Face) Addr() net.Addr { return f.lis.Addr() }

// Observe sets how the API is observed beyond its log line.
// Call it before Start.
func (f *Face) Observe(o Observe) { f.observe = o }

// Limit puts f's listener behind limit, which bounds its connections.
// It tells connState of each connection's state. An answer that takes
// longer than writeTimeout to write, from its first byte, closes its
// connection. Call it before Start.
func (f *Face) Limit(limit func(net.Listener) net.Listener, connState func(net.Conn, http.ConnState), writeTimeout time.Duration) {
	f.lis, f.connState, f.writeTimeout = limit(f.lis), connState, writeTimeout
}

// Close closes the listener of a Face never started.
func (f *Face) Close() error { return f.lis.Close() }

// Start makes the API, whose calls reach srv through Dial. Call it once
// srv's services are registered. It returns serve, which serves the API
// until Shutdown, over TLS when tlsConfig is not nil. After Shutdown,
// serve returns http.ErrServerClosed.
func (f *Face) Start(srv *grpc.Server, authn *auth.Authenticator, tlsConfig *tls.Config, logger *slog.Logger) (serve func() error) {
	f.conn = Dial(srv)
	h := Observed(New(f.conn, authn), logger, f.observe)
	if f.writeTimeout > 0 {
		h = connlimit.WriteDeadline(h, f.writeTimeout)
	}
	f.server = NewServer(h, logger)
	f.server.ConnState = f.connState
	lis := f.lis
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	return func() error { return f.server.Serve(lis) }
}

// Shutdown stops a started Face. It takes no new connections and lets
// calls in progress finish. Their gRPC calls are in progress too, so a
// graceful stop of the gRPC server waits for them. After grace, the rest
// are cut off.
func (f *Face) Shutdown(grace time.Duration) {
	if f.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := f.server.Shutdown(ctx); err != nil {
		f.server.Close()
	}
	f.conn.Close()
}
