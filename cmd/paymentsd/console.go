package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/paymentsd/paymentsd/console"
	"github.com/paymentsd/paymentsd/tlsreload"
)

// listenConsole binds --admin-listen; without it, nothing. The operators'
// file, --admin-keys, is read with the other credential files, and again
// when it changes.
func (m *Main) listenConsole() (err error) {
	if m.Config.AdminListen == "" {
		return nil
	}
	if m.consoleListener, err = net.Listen("tcp", m.Config.AdminListen); err != nil {
		return fmt.Errorf("admin console: %w", err)
	}
	return nil
}

// serveConsole serves the operator console on its listener, over TLS
// with the daemon's certificate when --tls-cert is set. Operators are not
// asked for a client certificate: their operator key is their credential.
func (m *Main) serveConsole() {
	if m.consoleListener == nil {
		return
	}
	c := console.New(console.Config{Store: m.db.Records(), Intents: m.db.Intents(), Operators: m.creds.Operators, Log: m.Logger, TLS: m.creds.TLS != nil})
	m.console = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ConnState: m.connState("console"), ErrorLog: m.errorLog("console")}
	lis := m.consoleListener
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
// the same grace, so that a lookup or release in progress finishes before
// the store closes under it. The returned func waits for it.
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
