package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/httpapi"
)

// httpAPI is the HTTP/JSON face of paymentsd (--http-listen).
type httpAPI struct {
	lis    net.Listener
	conn   *grpc.ClientConn // to m.grpc, in memory
	server *http.Server
}

// listenHTTP binds addr for the HTTP/JSON API, or returns nil if addr is
// empty: no HTTP.
func listenHTTP(addr string) (*httpAPI, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	return &httpAPI{lis: lis}, nil
}

// closeListener undoes listenHTTP when Run fails.
func (a *httpAPI) closeListener() {
	if a != nil {
		a.lis.Close()
	}
}

// serveHTTP serves the HTTP/JSON API, if bound. Its calls reach m.grpc
// through an in-memory connection, and so pass through every interceptor
// of a gRPC call: no rule is implemented twice.
func (m *Main) serveHTTP() {
	a := m.api
	if a == nil {
		return
	}
	a.conn = httpapi.Dial(m.grpc)
	a.server = httpapi.NewServer(httpapi.New(a.conn, m.creds.Authn), m.Logger)
	m.Logger.Info("http listening", "addr", a.lis.Addr().String(), "tls", m.creds.TLS != nil)
	lis := a.lis
	if m.creds.TLS != nil {
		lis = tls.NewListener(lis, m.creds.TLS.Config(m.creds.ClientAuth(), "h2", "http/1.1"))
	}
	m.wg.Go(func() {
		if err := a.server.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("serve http", "err", err)
		}
	})
}

// shutdownHTTP starts the HTTP server's shutdown, which runs beside gRPC's
// within the same grace: no new connections, calls in progress finished
// (their gRPC calls are in progress too, so GracefulStop waits for them),
// and at the grace the rest cut off. The returned func waits for it.
func (m *Main) shutdownHTTP() (wait func()) {
	a := m.api
	if a == nil || a.server == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownGrace)
		defer cancel()
		if err := a.server.Shutdown(ctx); err != nil {
			a.server.Close()
		}
		a.conn.Close()
	}()
	return func() { <-done }
}
