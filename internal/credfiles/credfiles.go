package main

import (
	"context"
	"crypto/x509"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/httpapi"
	"github.com/paymentsd/paymentsd/internal/filewatch"
	"github.com/paymentsd/paymentsd/tlsreload"
)

// credentialPoll is how often the credential files (--api-keys and the
// --tls-* files) are looked at for a change.
const credentialPoll = 250 * time.Millisecond

// configFileError is a credential file that cannot be used at start: a
// bad configuration, which paymentsd exits 2 for, as for a bad flag.
type configFileError struct{ err error }

func (e *configFileError) Error() string { return e.err.Error() }
func (e *configFileError) Unwrap() error { return e.err }

// loadCredentials reads the API keys and the TLS files for the first time.
// Their watchers take their first look before, and SIGHUP is caught from
// then on, so that a change or a SIGHUP while the server starts is acted
// on once it serves (watchCredentials), neither missed nor fatal.
func (m *Main) loadCredentials() error {
	if m.hup == nil { // main catches it earlier still
		m.hup = make(chan os.Signal, 1)
		signal.Notify(m.hup, syscall.SIGHUP)
	}
	if m.Config.APIKeysPath != "" {
		m.keysFile = filewatch.New(m.Config.APIKeysPath)
	}
	if m.Config.TLSCert != "" {
		m.tlsFiles = filewatch.New(m.tlsFilesConfig().Paths()...)
	}
	if err := m.readCredentials(); err != nil {
		signal.Stop(m.hup)
		return err
	}
	return nil
}

func (m *Main) tlsFilesConfig() tlsreload.Files {
	return tlsreload.Files{Cert: m.Config.TLSCert, Key: m.Config.TLSKey, ClientCA: m.Config.TLSClientCA}
}

func (m *Main) readCredentials() error {
	keys := auth.Dev()
	if m.Config.APIKeysPath != "" {
		var err error
		if keys, err = auth.LoadFile(m.Config.APIKeysPath); err != nil {
			return &configFileError{err}
		}
	}
	source, err := auth.ParseSource(m.Config.PrincipalFrom)
	if err != nil { // ParseFlags refuses it first
		return &configFileError{err}
	}
	m.authn = auth.NewAuthenticator(source, keys)
	if m.Config.TLSCert != "" {
		m.tls, err = tlsreload.Load(m.tlsFilesConfig())
		if err != nil {
			return &configFileError{err}
		}
		if m.Config.TLSClientCA != "" {
			m.authn.SetChainCheck(m.tls.StillTrusted)
		}
	}
	return nil
}

// clientAuth is whether the gRPC and HTTP listeners require client
// certificates.
func (m *Main) clientAuth() tlsreload.ClientAuth {
	return tlsreload.ClientAuth(m.Config.TLSClientCA != "")
}

// grpcCredentials are the gRPC server's: TLS with ALPN h2 when
// --tls-cert is set, plaintext otherwise, and the HTTP face's in-memory
// connection let in either way.
func (m *Main) grpcCredentials() credentials.TransportCredentials {
	if m.tls == nil {
		return httpapi.ServerCredentials(nil)
	}
	return httpapi.ServerCredentials(credentials.NewTLS(m.tls.Config(m.clientAuth(), "h2")))
}

// logCredentials says at start how callers are authenticated.
func (m *Main) logCredentials() {
	keys := m.authn.Keys()
	switch {
	case m.authn.Source() == auth.FromCert:
		m.Logger.Info("principals from client certificates")
	case keys.IsDev():
		m.Logger.Warn("dev mode: any bearer token is accepted as a principal of its own; pass --api-keys in production",
			"principal_from", m.authn.Source().String())
	default:
		m.Logger.Info("api keys loaded", "file", m.Config.APIKeysPath, "principals", keys.Principals(),
			"principal_from", m.authn.Source().String())
	}
	if m.tls != nil {
		m.logCertificate("tls certificate loaded", m.tls.Leaf())
	}
}

func (m *Main) logCertificate(msg string, leaf *x509.Certificate, attrs ...any) {
	m.Logger.Info(msg, append(attrs, "cert", m.Config.TLSCert, "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", m.Config.TLSClientCA != "")...)
}

// watchCredentials reads the API keys and the TLS files again when they
// change on disk (written in place, renamed over, or a symbolic link
// moved) and on SIGHUP. What does not load is logged and counted, and the
// previous keys or certificate stay in use.
func (m *Main) watchCredentials(ctx context.Context) {
	context.AfterFunc(ctx, func() { signal.Stop(m.hup) })
	keysFile, tlsFiles := m.keysFile, m.tlsFiles
	if keysFile != nil {
		m.wg.Go(func() { keysFile.Run(ctx, credentialPoll, func() { m.reloadKeys("file changed") }) })
	}
	if tlsFiles != nil {
		m.wg.Go(func() { tlsFiles.Run(ctx, credentialPoll, func() { m.reloadTLS("file changed") }) })
	}
	m.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.hup:
				if keysFile == nil && tlsFiles == nil {
					m.Logger.Info("SIGHUP: no credential file to read again")
				}
				if keysFile != nil {
					m.reloadKeys("SIGHUP")
				}
				if tlsFiles != nil {
					m.reloadTLS("SIGHUP")
				}
			}
		}
	})
}

// reloadKeys reads --api-keys again; a token removed is refused from the
// next request on.
func (m *Main) reloadKeys(why string) {
	m.reloading.Lock()
	defer m.reloading.Unlock()
	keys, err := auth.LoadFile(m.Config.APIKeysPath)
	m.prom.reloaded("api_keys", err)
	if err != nil {
		m.Logger.Error("api keys not reloaded: the previous keys stay in use", "trigger", why, "err", err)
		return
	}
	m.authn.SetKeys(keys)
	m.Logger.Info("api keys reloaded", "trigger", why, "file", m.Config.APIKeysPath, "principals", keys.Principals())
}

// reloadTLS reads the TLS files again: new connections get the new
// certificate (and client CAs), connections made keep theirs.
func (m *Main) reloadTLS(why string) {
	m.reloading.Lock()
	defer m.reloading.Unlock()
	err := m.tls.Reload()
	m.prom.reloaded("tls", err)
	if err != nil {
		m.Logger.Error("tls files not reloaded: the previous certificate stays in use", "trigger", why, "err", err)
		return
	}
	m.logCertificate("tls certificate reloaded", m.tls.Leaf(), "trigger", why)
}
