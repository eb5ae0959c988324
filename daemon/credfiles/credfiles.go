// Package credfiles loads paymentsd's credential files: the API keys, the
// operators' keys, the TLS certificate, key and client CAs. It reads them
// again when they change on disk or on a signal. When new ones do not
// load, the last good ones stay in use.
package credfiles

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/internal/filewatch"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
)

// Poll is how often the files are looked at for a change.
const Poll = 250 * time.Millisecond

// Config names the files, as the flags do.
type Config struct {
	APIKeys       string // --api-keys; empty is dev mode, any token accepted
	PrincipalFrom string // --principal-from
	TLSCert       string // empty serves plaintext
	TLSKey        string
	TLSClientCA   string // empty asks for no client certificate
	TLSClientCRL  string // revoked client certificates; empty for none
	AdminKeys     string // --admin-keys, the console's operators; empty for none
	MetricsToken  string // --metrics-token-file; empty: /metrics asks for none
}

// ConfigError is a credential file that cannot be used at start. It is a
// bad configuration: paymentsd exits 2 for it, as for a bad flag.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Credentials are the ones in use.
type Credentials struct {
	// Authn authenticates callers with the keys in use.
	Authn *auth.Authenticator
	// TLS serves the certificate in use; nil without Config.TLSCert.
	TLS *tlsreload.Server

	operators    atomic.Pointer[auth.Keys]         // nil without Config.AdminKeys
	metricsToken atomic.Pointer[[sha256.Size]byte] // nil without Config.MetricsToken

	config                        Config
	logger                        *slog.Logger
	keysFile, tlsFiles, adminFile *filewatch.Watcher // nil when not configured
	metricsFile                   *filewatch.Watcher
	// reloading serialises reloads. A watcher's and a signal's each read
	// then store, and could otherwise store the older file last.
	reloading sync.Mutex
}

// Load reads the files for the first time. Their watchers take their first
// look before it. A change while the server starts is then acted on once
// Watch runs, neither missed nor fatal.
func Load(c Config, logger *slog.Logger) (*Credentials, error) {
	cr := &Credentials{config: c, logger: logger}
	if c.APIKeys != "" {
		cr.keysFile = filewatch.New(c.APIKeys)
	}
	if c.TLSCert != "" {
		cr.tlsFiles = filewatch.New(cr.tlsFilesConfig().Paths()...)
	}
	if c.AdminKeys != "" {
		cr.adminFile = filewatch.New(c.AdminKeys)
		operators, err := auth.LoadFileOf(c.AdminKeys, "operator keys")
		if err != nil {
			return nil, &ConfigError{fmt.Errorf("--admin-keys: %w", err)}
		}
		cr.operators.Store(operators)
	}
	if c.MetricsToken != "" {
		cr.metricsFile = filewatch.New(c.MetricsToken)
		sum, err := loadMetricsToken(c.MetricsToken)
		if err != nil {
			return nil, &ConfigError{err}
		}
		cr.metricsToken.Store(sum)
	}
	keys := auth.Dev()
	if c.APIKeys != "" {
		var err error
		if keys, err = auth.LoadFile(c.APIKeys); err != nil {
			return nil, &ConfigError{err}
		}
	}
	source, err := auth.ParseSource(c.PrincipalFrom)
	if err != nil { // the flags are checked first
		return nil, &ConfigError{err}
	}
	if c.APIKeys != "" && c.AdminKeys != "" {
		if err := apart(c.APIKeys, c.AdminKeys, keys, cr.operators.Load()); err != nil {
			return nil, &ConfigError{err}
		}
	}
	cr.Authn = auth.NewAuthenticator(source, keys)
	if c.TLSCert != "" {
		if cr.TLS, err = tlsreload.Load(cr.tlsFilesConfig()); err != nil {
			return nil, &ConfigError{err}
		}
		if c.TLSClientCA != "" {
			cr.Authn.SetChainCheck(cr.TLS.StillTrusted)
		}
	}
	return cr, nil
}

// Operators are the console's operators' keys in use, nil without
// Config.AdminKeys. They are read on every request, so a reload takes
// effect at the next.
func (cr *Credentials) Operators() *auth.Keys { return cr.operators.Load() }

func (cr *Credentials) tlsFilesConfig() tlsreload.Files {
	return tlsreload.Files{Cert: cr.config.TLSCert, Key: cr.config.TLSKey, ClientCA: cr.config.TLSClientCA, ClientCRL: cr.config.TLSClientCRL}
}

// ClientAuth is whether the gRPC and HTTP listeners require client
// certificates.
func (cr *Credentials) ClientAuth() tlsreload.ClientAuth {
	return tlsreload.ClientAuth(cr.config.TLSClientCA != "")
}

// Log says how callers are authenticated, for the start.
func (cr *Credentials) Log() {
	keys := cr.Authn.Keys()
	switch {
	case cr.Authn.Source() == auth.FromCert:
		cr.logger.Info("principals from client certificates")
	case keys.IsDev():
		cr.logger.Warn("dev mode: any bearer token is accepted as a principal of its own; pass --api-keys in production",
			"principal_from", cr.Authn.Source().String())
	default:
		cr.logger.Info("api keys loaded", "file", cr.config.APIKeys, "principals", keys.Principals(),
			"principal_from", cr.Authn.Source().String())
	}
	if cr.TLS != nil {
		cr.logCertificate("tls certificate loaded", cr.TLS.Leaf())
		cr.logCRLs()
	}
}

// logCRLs logs each client CRL in force: whose it is, its number, when it
// was issued and when it must be replaced.
func (cr *Credentials) logCRLs(attrs ...any) {
	for _, crl := range cr.TLS.CRLs() {
		cr.logger.Info("tls client CRL in force", append(attrs, "file", cr.config.TLSClientCRL, "issuer", crl.Issuer,
			"crl_number", crl.Number.String(), "this_update", crl.ThisUpdate.UTC().Format(time.RFC3339),
			"next_update", crl.NextUpdate.UTC().Format(time.RFC3339), "revoked", crl.Revoked)...)
	}
}

func (cr *Credentials) logCertificate(msg string, leaf *x509.Certificate, attrs ...any) {
	cr.logger.Info(msg, append(attrs, "cert", cr.config.TLSCert, "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", cr.config.TLSClientCA != "")...)
}

// Watch reads the files again, in goroutines of wg until ctx ends. It
// reads them when they change on disk, and when hup receives (SIGHUP). A
// change is a write in place, a rename over, or a symbolic link moved.
// Each reload is reported to reloaded with its error. The names are
// "api_keys", "admin_keys", "tls" and "metrics_token". What does not load
// is logged, and the previous keys or certificate stay in use.
func (cr *Credentials) Watch(ctx context.Context, wg *sync.WaitGroup, hup <-chan os.Signal, reloaded func(file string, err error)) {
	if cr.keysFile != nil {
		wg.Go(func() { cr.keysFile.Run(ctx, Poll, func() { cr.reloadKeys("file changed", reloaded, cr.apiKeys()) }) })
	}
	if cr.tlsFiles != nil {
		wg.Go(func() { cr.tlsFiles.Run(ctx, Poll, func() { cr.reloadTLS("file changed", reloaded) }) })
	}
	if cr.adminFile != nil {
		wg.Go(func() {
			cr.adminFile.Run(ctx, Poll, func() { cr.reloadKeys("file changed", reloaded, cr.operatorKeys()) })
		})
	}
	if cr.metricsFile != nil {
		wg.Go(func() {
			cr.metricsFile.Run(ctx, Poll, func() { cr.reloadMetricsToken("file changed", reloaded) })
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if cr.keysFile == nil && cr.tlsFiles == nil && cr.adminFile == nil && cr.metricsFile == nil {
					cr.logger.Info("SIGHUP: no credential file to read again")
				}
				if cr.keysFile != nil {
					cr.reloadKeys("SIGHUP", reloaded, cr.apiKeys())
				}
				if cr.tlsFiles != nil {
					cr.reloadTLS("SIGHUP", reloaded)
				}
				if cr.adminFile != nil {
					cr.reloadKeys("SIGHUP", reloaded, cr.operatorKeys())
				}
				if cr.metricsFile != nil {
					cr.reloadMetricsToken("SIGHUP", reloaded)
				}
			}
		}
	})
}

// keyFile is a file of keys in the --api-keys format, read again when it
// changes: the API keys', or the operators'.
type keyFile struct {
	label   string // as reloads are reported: api_keys, admin_keys
	subject string // as the log names them: api keys, operator keys
	count   string // the log's name for how many it lists
	path    string
	use     func(*auth.Keys) // puts them in use
	// apart refuses keys that meet the other file's in use; nil when
	// there is no other file.
	apart func(*auth.Keys) error
}

func (cr *Credentials) apiKeys() keyFile {
	f := keyFile{"api_keys", "api keys", "principals", cr.config.APIKeys, cr.Authn.SetKeys, nil}
	if cr.config.AdminKeys != "" {
		f.apart = func(k *auth.Keys) error { return apart(cr.config.APIKeys, cr.config.AdminKeys, k, cr.operators.Load()) }
	}
	return f
}

func (cr *Credentials) operatorKeys() keyFile {
	f := keyFile{"admin_keys", "operator keys", "operators", cr.config.AdminKeys, cr.operators.Store, nil}
	if cr.config.APIKeys != "" {
		f.apart = func(k *auth.Keys) error { return apart(cr.config.APIKeys, cr.config.AdminKeys, cr.Authn.Keys(), k) }
	}
	return f
}

// reloadKeys reads f again. A key removed is refused from the next
// request on; for operators, so are the sessions it logged in.
func (cr *Credentials) reloadKeys(why string, reloaded func(string, error), f keyFile) {
	cr.reloading.Lock()
	defer cr.reloading.Unlock()
	keys, err := auth.LoadFileOf(f.path, f.subject)
	if err == nil && f.apart != nil {
		err = f.apart(keys)
	}
	reloaded(f.label, err)
	if err != nil {
		cr.logger.Error(f.subject+" not reloaded: the previous keys stay in use", "trigger", why, "err", err)
		return
	}
	f.use(keys)
	cr.logger.Info(f.subject+" reloaded", "trigger", why, "file", f.path, f.count, keys.Principals())
}

// reloadTLS reads the TLS files again. New connections get the new
// certificate, client CAs and CRLs; connections made keep theirs, unless
// a new CRL revokes their client certificate.
func (cr *Credentials) reloadTLS(why string, reloaded func(string, error)) {
	cr.reloading.Lock()
	defer cr.reloading.Unlock()
	err := cr.TLS.Reload()
	reloaded("tls", err)
	if err != nil {
		cr.logger.Error("tls files not reloaded: the previous certificate stays in use", "trigger", why, "err", err)
		return
	}
	cr.logCertificate("tls certificate reloaded", cr.TLS.Leaf(), "trigger", why)
	cr.logCRLs("trigger", why)
}
