package credfiles_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/credfiles"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/daemon/testkit/logbuf"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
)

// reloads records what Watch reports.
type reloads struct {
	mu  sync.Mutex
	got []string
}

func (r *reloads) reloaded(file string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, file+" "+map[bool]string{true: "ok", false: "error"}[err == nil])
}

func (r *reloads) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, ", ")
}

func writeKeys(t *testing.T, path string, principals ...string) {
	t.Helper()
	var lines []string
	for _, p := range principals {
		lines = append(lines, auth.KeyLine(p, "token-of-"+p))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// watch runs cr.Watch until the test ends.
func watch(t *testing.T, cr *credfiles.Credentials, hup <-chan os.Signal, r *reloads) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cr.Watch(ctx, &wg, hup, r.reloaded)
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestLoad_DevMode(t *testing.T) {
	var log logbuf.Buffer
	cr, err := credfiles.Load(credfiles.Config{PrincipalFrom: "bearer"}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !cr.Authn.Keys().IsDev() || cr.TLS != nil || cr.ClientAuth() != tlsreload.NoClientCert {
		t.Errorf("got keys dev %v, TLS %v, client auth %v; want dev mode, plaintext", cr.Authn.Keys().IsDev(), cr.TLS, cr.ClientAuth())
	}
	cr.Log()
	if !strings.Contains(log.String(), "dev mode") {
		t.Errorf("log %q does not warn of dev mode", log.String())
	}
}

func TestLoad_BadFileIsAConfigError(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("not a key line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []credfiles.Config{
		{APIKeys: keys, PrincipalFrom: "bearer"},
		{APIKeys: filepath.Join(t.TempDir(), "missing"), PrincipalFrom: "bearer"},
		{PrincipalFrom: "bearer", TLSCert: filepath.Join(t.TempDir(), "missing.pem"), TLSKey: keys},
		{PrincipalFrom: "bearer", AdminKeys: keys},
	} {
		_, err := credfiles.Load(c, slog.New(slog.DiscardHandler))
		var bad *credfiles.ConfigError
		if !errors.As(err, &bad) {
			t.Errorf("%+v: got %v, want a ConfigError", c, err)
		}
	}
}

// A key file, the API keys' or the operators', replaced is read again;
// one that does not load leaves the keys in use, and a signal reads it
// again.
func TestWatch_KeysReloaded(t *testing.T) {
	for _, c := range []struct {
		file   string // as reloads are reported
		config func(path string) credfiles.Config
		keys   func(*credfiles.Credentials) *auth.Keys
	}{
		{"api_keys", func(path string) credfiles.Config { return credfiles.Config{APIKeys: path, PrincipalFrom: "bearer"} },
			func(cr *credfiles.Credentials) *auth.Keys { return cr.Authn.Keys() }},
		{"admin_keys", func(path string) credfiles.Config { return credfiles.Config{AdminKeys: path, PrincipalFrom: "bearer"} },
			(*credfiles.Credentials).Operators},
	} {
		t.Run(c.file, func(t *testing.T) {
			keys := filepath.Join(t.TempDir(), "keys")
			writeKeys(t, keys, "alice")
			var log logbuf.Buffer
			cr, err := credfiles.Load(c.config(keys), slog.New(slog.NewTextHandler(&log, nil)))
			if err != nil {
				t.Fatal(err)
			}
			hup := make(chan os.Signal, 1)
			r := &reloads{}
			watch(t, cr, hup, r)

			writeKeys(t, keys, "alice", "bob")
			eventually(t, "bob's key", func() bool { return c.keys(cr).Principals() == 2 })
			if err := os.WriteFile(keys, []byte("garbage\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the failed reload", func() bool { return r.String() == c.file+" ok, "+c.file+" error" })
			if p, ok := c.keys(cr).Authenticate("token-of-bob"); !ok || p != "bob" {
				t.Errorf("after a bad file: bob's token gives %q, %v; want the keys kept", p, ok)
			}
			writeKeys(t, keys, "carol")
			hup <- os.Interrupt // any value: the signal's channel
			eventually(t, "carol's key", func() bool { return strings.Contains(log.String(), "trigger=SIGHUP") })
			if p, ok := c.keys(cr).Authenticate("token-of-carol"); !ok || p != "carol" {
				t.Errorf("after SIGHUP: carol's token gives %q, %v", p, ok)
			}
			if _, ok := c.keys(cr).Authenticate("token-of-bob"); ok {
				t.Errorf("after SIGHUP: bob's token, no longer listed, is still accepted")
			}
		})
	}
}

// A certificate replaced is served to new connections.
func TestWatch_TLSReloaded(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	for _, d := range []string{first, second} {
		if _, err := devcerts.Dev(d); err != nil {
			t.Fatal(err)
		}
	}
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	install := func(from string) {
		for _, name := range []string{"server.pem", "server-key.pem"} {
			data, err := os.ReadFile(filepath.Join(from, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name+".tmp"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	cr, err := credfiles.Load(credfiles.Config{PrincipalFrom: "bearer", TLSCert: cert, TLSKey: key}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	serial := cr.TLS.Leaf().SerialNumber.String()
	r := &reloads{}
	watch(t, cr, make(chan os.Signal), r)
	install(second)
	eventually(t, "the new certificate", func() bool { return cr.TLS.Leaf().SerialNumber.String() != serial })
	if got := r.String(); !strings.HasSuffix(got, "tls ok") {
		t.Errorf("reloads %q, want tls ok last", got)
	}
}
