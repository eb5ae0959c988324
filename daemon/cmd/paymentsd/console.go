package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"

	"github.com/paymentsd/paymentsd/daemon/console"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
)

// serveConsole serves the operator console on its listener, over TLS
// with the daemon's certificate when --tls-cert is set. Operators are not
// asked for a client certificate: their operator key is their credential.
func (m *Main) serveConsole() {
	if m.lis.Console == nil {
		return
	}
	c := console.New(console.Config{Store: m.db.Records(), Intents: m.db.Intents(), Operators: m.creds.Operators, Log: m.Logger, TLS: m.creds.TLS != nil})
	m.console = m.lis.HTTPServer("console", c)
	lis := m.lis.Console
	if m.creds.TLS != nil {
		lis = tls.NewListener(lis, m.creds.TLS.Config(tlsreload.NoClientCert, "h2", "http/1.1"))
	}
	m.Logger.Info("console listening", "addr", lis.Addr().String(), "tls", m.creds.TLS != nil, "operators", m.creds.Operators().Principals())
	m.wg.Go(func() {
		if err := m.console.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("serve console", "err", err)
		}
	})
}

// shutdownConsole starts the console's shutdown, beside gRPC's within
// the same grace. A lookup or release in progress then finishes before the
// store closes under it. The returned func waits for it.
func (m *Main) shutdownConsole() (wait func()) {
	if m.console == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownGrace)
		defer cancel()
		if m.console.Shutdown(ctx) != nil {
			m.console.Close()
		}
	}()
	return func() { <-done }
}
