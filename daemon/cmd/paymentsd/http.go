package main

import (
	"crypto/tls"
	"errors"
	"net/http"

	"github.com/paymentsd/paymentsd/daemon/httpapi"
)

// serveHTTP serves the HTTP/JSON API, if bound. Its calls reach m.grpc
// through an in-memory connection. They pass through every interceptor of
// a gRPC call, so no rule is implemented twice. Each request is logged,
// counted and traced before it reaches them. The face's own refusals are
// thus seen too.
func (m *Main) serveHTTP() {
	if m.lis.API == nil {
		return
	}
	m.Logger.Info("http listening", "addr", m.lis.API.Addr().String(), "tls", m.creds.TLS != nil)
	var tlsConfig *tls.Config
	if m.creds.TLS != nil {
		tlsConfig = m.creds.TLS.Config(m.creds.ClientAuth(), "h2", "http/1.1")
	}
	observe := httpapi.Observe{Trace: m.tracing.HTTPHandler}
	if m.prom != nil {
		observe.Metrics = m.prom.HTTP
	}
	m.lis.API.Observe(observe)
	serve := m.lis.API.Start(m.grpc, m.creds.Authn, tlsConfig, m.Logger)
	m.wg.Go(func() {
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("serve http", "err", err)
		}
	})
}

// shutdownHTTP starts the HTTP server's shutdown, which runs beside gRPC's
// within the same grace. The returned func waits for it.
func (m *Main) shutdownHTTP() (wait func()) {
	if m.lis.API == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.lis.API.Shutdown(m.Config.ShutdownGrace)
	}()
	return func() { <-done }
}
