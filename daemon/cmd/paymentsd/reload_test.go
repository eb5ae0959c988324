package main

// Credential files against the real binary: --api-keys and the TLS files
// read again on a change or SIGHUP without a restart, certificates rotated
// under load without a failed call, files that are not regular or that
// others may write refused at start (and a FIFO named as the data file
// refused by the server and the operator commands instead of hanging),
// the PAYMENTSD_* environment, and no token or password in the log.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
)

// exitBound is how long a refusal at start may take: the process is
// expected to exit at once, and this only leaves room for a loaded machine.
const exitBound = 5 * time.Second

// writeInPlace writes data into path's existing file (or a new one) and
// sets its mode exactly, whatever the umask.
func writeInPlace(t *testing.T, path string, mode os.FileMode, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// replaceByRename writes data to a temp name in path's directory and
// renames it over path, as an operator's atomic update does.
func replaceByRename(t *testing.T, path string, mode os.FileMode, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	writeInPlace(t, tmp, mode, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// keyFile is the content of an API key file listing each principal, token
// pair.
func keyFile(pairs ...string) string {
	var b strings.Builder
	b.WriteString("# principal sha256:<hex>\n")
	for i := 0; i < len(pairs); i += 2 {
		b.WriteString(auth.KeyLine(pairs[i], pairs[i+1]) + "\n")
	}
	return b.String()
}

// authCode is the code of a ListPaymentIntents with token: OK when the
// token is accepted, UNAUTHENTICATED when it is not.
func (d *daemon) authCode(token string) codes.Code {
	ctx, cancel := context.WithTimeout(withCreds(token, ""), 5*time.Second)
	defer cancel()
	_, err := d.client.ListPaymentIntents(ctx, &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	return status.Code(err)
}

// logLines returns the log lines of d with message msg, decoded.
func (d *daemon) logLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(d.stderr()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// waitLog waits up to limit for a log line of d with message msg whose
// fields include want, and returns it.
func (d *daemon) waitLog(t *testing.T, limit time.Duration, msg string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		for _, line := range d.logLines(msg) {
			match := true
			for k, v := range want {
				match = match && line[k] == v
			}
			if match {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line with %v within %v:\n%s", msg, want, limit, d.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stillRunning fails t if d's process has exited or has started serving
// more than once: a reload must not be a restart.
func (d *daemon) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	default:
	}
	if n := len(d.logLines("paymentsd listening")); n != 1 {
		t.Fatalf("paymentsd started listening %d times, want once:\n%s", n, d.stderr())
	}
}

// watching waits until d, on a bbolt file, watches its credential files:
// it starts to once Run has returned, and the admin socket comes after.
// A change made before then is the subject of
// TestReload_APIKeys_ChangedDuringStartup_Seen, not of the others.
func (d *daemon) watching(t *testing.T) {
	t.Helper()
	d.waitLog(t, 10*time.Second, "admin socket listening", nil)
}

func TestReload_APIKeys_RenameSIGHUPAndBrokenFile(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	const t1, t2, t3 = "reload-token-one", "reload-token-two", "reload-token-333"
	writeInPlace(t, keys, 0o600, keyFile("alice", t1))
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--api-keys", keys, "--metrics-listen", "127.0.0.1:0")
	d.watching(t)
	metricsAddr := d.metricsAddr(t)
	if c := d.authCode(t1); c != codes.OK {
		t.Fatalf("t1 at start: %v, want OK", c)
	}
	if c := d.authCode(t2); c != codes.Unauthenticated {
		t.Fatalf("t2 at start: %v, want UNAUTHENTICATED", c)
	}

	// 1. A new file renamed over the old one: t2 in, t1 out, within a
	// second, by the same process.
	replaceByRename(t, keys, 0o600, keyFile("bob", t2))
	renamed := time.Now()
	var c1, c2 codes.Code
	for {
		c1, c2 = d.authCode(t1), d.authCode(t2)
		if c1 == codes.Unauthenticated && c2 == codes.OK {
			break
		}
		if time.Since(renamed) > time.Second {
			t.Fatalf("1s after the rename: t1 %v, t2 %v; want UNAUTHENTICATED and OK:\n%s", c1, c2, d.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("rename seen after %v", time.Since(renamed).Round(time.Millisecond))
	d.stillRunning(t)
	d.waitLog(t, time.Second, "api keys reloaded", map[string]any{"trigger": "file changed", "principals": 1.0})
	if a := d.create(withCreds(t2, "after-rename"), seedRequest("1")); a.err != nil {
		t.Errorf("create with t2 after the rename: %v", a.err)
	}
	if a := d.create(withCreds(t1, "after-rename-t1"), seedRequest("1")); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("create with t1 after the rename: %v, want UNAUTHENTICATED", a.err)
	}

	// 2. Rewritten in place (the same inode), then SIGHUP at once.
	before, err := os.Stat(keys)
	if err != nil {
		t.Fatal(err)
	}
	writeInPlace(t, keys, 0o600, keyFile("carol", t3))
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	hupped := time.Now()
	after, err := os.Stat(keys)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the in-place rewrite made a new file; the test is wrong")
	}
	for {
		c2, c3 := d.authCode(t2), d.authCode(t3)
		if c2 == codes.Unauthenticated && c3 == codes.OK {
			break
		}
		if time.Since(hupped) > time.Second {
			t.Fatalf("1s after SIGHUP: t2 %v, t3 %v; want UNAUTHENTICATED and OK:\n%s", c2, c3, d.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.waitLog(t, time.Second, "api keys reloaded", map[string]any{"trigger": "SIGHUP"})
	d.stillRunning(t)

	// 3. A broken file: the previous keys stay, the log says why, the
	// metric counts an error.
	const errSeries = `paymentsd_credential_reloads_total{file="api_keys",result="error"}`
	const okSeries = `paymentsd_credential_reloads_total{file="api_keys",result="ok"}`
	m := scrape(t, metricsAddr)
	errsBefore, ok := m[errSeries]
	if !ok {
		t.Fatalf("%s not exported", errSeries)
	}
	if m[okSeries] < 2 {
		t.Errorf("%s = %v after two reloads, want at least 2", okSeries, m[okSeries])
	}
	replaceByRename(t, keys, 0o600, keyFile("carol", t3)+"this line is not a key\n")
	line := d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "file changed"})
	if e, _ := line["err"].(string); !strings.Contains(e, keys+":3") {
		t.Errorf("the refusal %q does not name the file and line (%s:3)", e, keys)
	}
	deadline := time.Now().Add(2 * time.Second)
	for scrape(t, metricsAddr)[errSeries] <= errsBefore {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed at %v after a broken file", errSeries, errsBefore)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := d.authCode(t3); c != codes.OK {
		t.Errorf("t3 after a broken file: %v, want OK (the previous keys stay)", c)
	}
	if c := d.authCode(t2); c != codes.Unauthenticated {
		t.Errorf("t2 after a broken file: %v, want UNAUTHENTICATED", c)
	}
	// SIGHUP with the file still broken: refused again, no harm.
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLog(t, time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "SIGHUP"})
	if c := d.authCode(t3); c != codes.OK {
		t.Errorf("t3 after SIGHUP on a broken file: %v, want OK", c)
	}
	d.stillRunning(t)
}

// serverPair issues a server certificate for 127.0.0.1 and localhost.
func serverPair(t *testing.T, ca *devcerts.CA) *devcerts.Pair {
	t.Helper()
	p, err := ca.Issue(devcerts.LocalServer())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// servedSerial is the serial of the certificate a new TLS connection to
// addr is given.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) *big.Int {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("tls probe of %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// waitSerial waits up to limit for new connections to addr to be given
// the certificate of serial.
func waitSerial(t *testing.T, addr string, roots *x509.CertPool, serial *big.Int, limit time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		got := servedSerial(t, addr, roots)
		if got.Cmp(serial) == 0 {
			t.Logf("serial %x served %v after the files were replaced", serial, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > limit {
			t.Fatalf("new connections still get serial %x %v after the files were replaced, want %x", got, limit, serial)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRotation_TLSUnderLoad_NoRequestFails(t *testing.T) {
	dir := t.TempDir()
	ca, err := devcerts.NewCA("rotation test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	first := serverPair(t, ca)
	if err := first.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--tls-cert", certFile, "--tls-key", keyFile)
	d.watching(t)
	if got := servedSerial(t, d.addr, roots); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("served serial %x, want %x", got, first.Cert.SerialNumber)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots})
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(d.addr, grpc.WithTransportCredentials(creds))
	}

	const (
		churners      = 8   // each makes a new connection every few calls
		callsPerConn  = 3   // of a churner's connection
		longLived     = 2   // connections kept for the whole run
		maxCalls      = 600 // of each goroutine: the load is bounded in count
		loadFor       = 4 * time.Second
		perCallBudget = 5 * time.Second
	)
	var (
		calls, conns atomic.Int64
		mu           sync.Mutex
		failures     []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	stopAt := time.Now().Add(loadFor)
	call := func(conn *grpc.ClientConn, g, i int, p *peer.Peer) error {
		ctx, cancel := context.WithTimeout(withCreds(fmt.Sprintf("rotation-%d", g), fmt.Sprintf("k-%d-%d", g, i)), perCallBudget)
		defer cancel()
		resp, err := paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(ctx, seedRequest("1"), grpc.Peer(p))
		calls.Add(1)
		if err == nil && resp.GetPaymentIntent().GetId() == "" {
			err = errors.New("no intent in the answer")
		}
		return err
	}
	var wg sync.WaitGroup
	for g := range churners {
		wg.Go(func() {
			var conn *grpc.ClientConn
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for i := 0; i < maxCalls && time.Now().Before(stopAt); i++ {
				if i%callsPerConn == 0 {
					if conn != nil {
						conn.Close()
					}
					var err error
					if conn, err = dial(); err != nil {
						fail("churner %d: new connection: %v", g, err)
						return
					}
					conns.Add(1)
				}
				if err := call(conn, g, i, &peer.Peer{}); err != nil {
					fail("churner %d call %d: %v", g, i, err)
				}
			}
		})
	}
	longSerials := make([]map[string]bool, longLived)
	for l := range longLived {
		g := churners + l
		longSerials[l] = map[string]bool{}
		wg.Go(func() {
			conn, err := dial()
			if err != nil {
				fail("long-lived %d: %v", l, err)
				return
			}
			defer conn.Close()
			conns.Add(1)
			for i := 0; i < maxCalls && time.Now().Before(stopAt); i++ {
				var p peer.Peer
				if err := call(conn, g, i, &p); err != nil {
					fail("long-lived %d call %d: %v", l, i, err)
					continue
				}
				if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
					longSerials[l][info.State.PeerCertificates[0].SerialNumber.Text(16)] = true
				}
			}
		})
	}

	// First rotation: the key renamed into place, then the certificate
	// (Pair.WriteFiles). A poll between the two sees a key that is not the
	// certificate's and keeps the old pair; the next sees both.
	time.Sleep(700 * time.Millisecond)
	second := serverPair(t, ca)
	if err := second.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, d.addr, roots, second.Cert.SerialNumber, 2*time.Second)
	callsAtFirst := calls.Load()

	// Second rotation: both written to temp names, then renamed one right
	// after the other.
	time.Sleep(700 * time.Millisecond)
	third := serverPair(t, ca)
	tmpCert, tmpKey := certFile+".next", keyFile+".next"
	writeInPlace(t, tmpKey, 0o600, string(third.KeyPEM))
	writeInPlace(t, tmpCert, 0o644, string(third.CertPEM))
	if err := os.Rename(tmpKey, keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpCert, certFile); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, d.addr, roots, third.Cert.SerialNumber, 2*time.Second)
	callsAtSecond := calls.Load()

	wg.Wait()
	total := calls.Load()
	t.Logf("%d calls over %d connections; %d before the first rotation was served, %d before the second", total, conns.Load(), callsAtFirst, callsAtSecond)
	for _, f := range failures {
		t.Error(f)
	}
	if total <= callsAtSecond {
		t.Errorf("no call after the second rotation was served (%d calls in all): the load ended too soon to tell", total)
	}
	d.stillRunning(t)
	for l, serials := range longSerials {
		if want := first.Cert.SerialNumber.Text(16); len(serials) != 1 || !serials[want] {
			t.Errorf("long-lived connection %d saw serials %v, want only the first certificate's %s (a connection keeps its certificate)", l, serials, want)
		}
	}
	d.waitLog(t, time.Second, "tls certificate reloaded", map[string]any{"serial": second.Cert.SerialNumber.Text(16)})
	d.waitLog(t, time.Second, "tls certificate reloaded", map[string]any{"serial": third.Cert.SerialNumber.Text(16)})
	for _, line := range d.logLines("tls files not reloaded: the previous certificate stays in use") {
		t.Logf("a half-replaced pair was refused, as it may be: %v", line["err"])
	}
}

// A credential file that is not a regular file, or that group or others
// can write, stops the server at once with exit 2, naming the file and
// what is wrong, before any data file is made.
func TestUnsafeCredentialFile_Exits2AtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup makes the file in dir and returns the flags naming it and
		// what the message must say of it.
		setup func(t *testing.T, dir string) (args []string, says string)
	}{
		{"api keys a FIFO", func(t *testing.T, dir string) ([]string, string) {
			fifo := filepath.Join(dir, "api-keys")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--api-keys", fifo}, "FIFO"
		}},
		{"api keys a directory", func(t *testing.T, dir string) ([]string, string) {
			keysDir := filepath.Join(dir, "api-keys.d")
			if err := os.Mkdir(keysDir, 0o700); err != nil {
				t.Fatal(err)
			}
			return []string{"--api-keys", keysDir}, "directory"
		}},
		{"api keys 0666", func(t *testing.T, dir string) ([]string, string) {
			keys := filepath.Join(dir, "api-keys")
			writeInPlace(t, keys, 0o666, keyFile("alice", "ww-token"))
			return []string{"--api-keys", keys}, "0666"
		}},
		{"api keys 0620", func(t *testing.T, dir string) ([]string, string) {
			keys := filepath.Join(dir, "api-keys")
			writeInPlace(t, keys, 0o620, keyFile("alice", "ww-token"))
			return []string{"--api-keys", keys}, "0620"
		}},
		{"tls key 0606", func(t *testing.T, dir string) ([]string, string) {
			ca, err := devcerts.NewCA("world-writable test CA")
			if err != nil {
				t.Fatal(err)
			}
			certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
			if err := serverPair(t, ca).WriteFiles(certFile, keyFile); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(keyFile, 0o606); err != nil {
				t.Fatal(err)
			}
			return []string{"--tls-cert", certFile, "--tls-key", keyFile}, "0606"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args, says := tc.setup(t, dir)
			d := launch(t, filepath.Join(dir, "data", "paymentsd.db"), args...)
			if code := exitOf(t, d, exitBound); code != 2 {
				t.Errorf("exit %d, want 2:\n%s", code, d.stderr())
			}
			if file := args[len(args)-1]; !strings.Contains(d.stderr(), says) || !strings.Contains(d.stderr(), file) {
				t.Errorf("stderr does not name %s and say %q:\n%s", file, says, d.stderr())
			}
			noDataDir(t, filepath.Join(dir, "data"))
		})
	}
}

func TestFIFO_DataFile_RefusedNotHanging(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "paymentsd.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "backup.db")
	env := cleanEnv()
	for _, args := range [][]string{
		{"check", "--db", fifo},
		{"record", "--db", fifo, "--principal", "p", "--key", "k"},
		{"backup", out, "--db", fifo},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := runBounded(t, exitBound, "", env, args...)
			if r.code != 2 && r.code != 3 {
				t.Errorf("exit %d, want 2 or 3\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr+r.stdout, "FIFO") {
				t.Errorf("the refusal does not say FIFO:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
		})
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup of a FIFO left %s: %v", out, err)
	}
	t.Run("server", func(t *testing.T) {
		d := launch(t, fifo)
		if code := exitOf(t, d, exitBound); code == 0 {
			t.Errorf("exit 0, want a failure:\n%s", d.stderr())
		}
		if !strings.Contains(d.stderr(), "FIFO") || !strings.Contains(d.stderr(), fifo) {
			t.Errorf("stderr does not name %s as a FIFO:\n%s", fifo, d.stderr())
		}
	})
	if info, err := os.Lstat(fifo); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v, %v", info, err)
	}
}

func TestEnv_ConfiguresServer_FlagWins(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "env-token"))
	dbPath := filepath.Join(dir, "env.db")

	t.Run("variables alone", func(t *testing.T) {
		d := launchEnv(t, cleanEnv(
			"PAYMENTSD_LISTEN=127.0.0.1:0",
			"PAYMENTSD_HTTP_LISTEN=127.0.0.1:0",
			"PAYMENTSD_METRICS_LISTEN=127.0.0.1:0",
			"PAYMENTSD_DB="+dbPath,
			"PAYMENTSD_API_KEYS="+keys,
			"PAYMENTSD_LEASE=3s",
		))
		d.addr = waitListening(t, d)
		conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		d.client = paymentsv1.NewPaymentIntentServiceClient(conn)
		if c := d.authCode("env-token"); c != codes.OK {
			t.Errorf("listed token: %v, want OK (PAYMENTSD_API_KEYS)", c)
		}
		if c := d.authCode("other-token"); c != codes.Unauthenticated {
			t.Errorf("unlisted token: %v, want UNAUTHENTICATED (PAYMENTSD_API_KEYS)", c)
		}
		if line := d.waitLog(t, time.Second, "paymentsd listening", nil); line["db"] != dbPath || line["lease"] != "3s" {
			t.Errorf("listening line %v: want db %s (PAYMENTSD_DB), lease 3s (PAYMENTSD_LEASE)", line, dbPath)
		}
		httpBase := "http://" + d.logAddr(t, "http listening")
		if a := httpCall(t, "GET", httpBase+"/v1/payment_intents", "", bearerHeader("env-token")...); a.status != 200 {
			t.Errorf("HTTP face (PAYMENTSD_HTTP_LISTEN): %d %s, want 200", a.status, a.body)
		}
		scrape(t, d.metricsAddr(t)) // PAYMENTSD_METRICS_LISTEN
		if err := d.stop(t); err != nil {
			t.Fatalf("stop: %v\n%s", err, d.stderr())
		}
	})

	t.Run("flag wins", func(t *testing.T) {
		flagDB := filepath.Join(dir, "flag.db")
		d := launchEnv(t, cleanEnv(
			"PAYMENTSD_LISTEN=256.0.0.1:0", // would fail if used
			"PAYMENTSD_HTTP_LISTEN=",
			"PAYMENTSD_DB="+filepath.Join(dir, "not-this.db"),
			"PAYMENTSD_API_KEYS="+filepath.Join(dir, "no-such-keys"),
		), "--listen", "127.0.0.1:0", "--db", flagDB, "--api-keys", keys)
		d.addr = waitListening(t, d)
		if line := d.waitLog(t, time.Second, "paymentsd listening", nil); line["db"] != flagDB {
			t.Errorf("listening line %v: want the flag's db %s", line, flagDB)
		}
		if _, err := os.Stat(filepath.Join(dir, "not-this.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("PAYMENTSD_DB's file was made although --db was given: %v", err)
		}
		d.stop(t)
	})

	t.Run("invalid value", func(t *testing.T) {
		for _, kv := range [][2]string{
			{"PAYMENTSD_LEASE", "abc"},
			{"PAYMENTSD_SHUTDOWN_GRACE", "hunter2-not-a-duration"},
			{"PAYMENTSD_DB_POOL", "s3cr3t-pool"},
		} {
			d := launchEnv(t, cleanEnv(kv[0]+"="+kv[1], "PAYMENTSD_LISTEN=127.0.0.1:0", "PAYMENTSD_HTTP_LISTEN=",
				"PAYMENTSD_DB="+filepath.Join(dir, "data-invalid", "x.db")))
			if code := exitOf(t, d, exitBound); code != 2 {
				t.Errorf("%s=%s: exit %d, want 2:\n%s", kv[0], kv[1], code, d.stderr())
			}
			if !strings.Contains(d.stderr(), kv[0]) {
				t.Errorf("%s=%s: stderr does not name the variable:\n%s", kv[0], kv[1], d.stderr())
			}
			if strings.Contains(d.stderr(), kv[1]) {
				t.Errorf("%s=%s: stderr repeats the value:\n%s", kv[0], kv[1], d.stderr())
			}
		}
		noDataDir(t, filepath.Join(dir, "data-invalid"))
	})

	t.Run("check reads PAYMENTSD_DB", func(t *testing.T) {
		r := runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+dbPath), "check")
		r.want(t, 0, dbPath+": sound")
		// The flag wins in a subcommand too.
		r = runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+filepath.Join(dir, "no-such.db")), "check", "--db", dbPath)
		r.want(t, 0, dbPath+": sound")
		// And without the flag, the variable is what is read.
		r = runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+filepath.Join(dir, "no-such.db")), "check")
		if r.code != 3 || !strings.Contains(r.stderr, filepath.Join(dir, "no-such.db")) {
			t.Errorf("check with PAYMENTSD_DB naming no file: exit %d, stderr %q; want 3 naming it", r.code, r.stderr)
		}
	})

	t.Run("help", func(t *testing.T) {
		r := runBounded(t, 30*time.Second, "", cleanEnv(), "help")
		r.want(t, 0, "PAYMENTSD_", "PAYMENTSD_API_KEYS", "PAYMENTSD_DB")
	})
}

func TestEnv_DatabasePassword_NeverLogged(t *testing.T) {
	const password = "s3cr3t-pw"
	url := "postgres://u:" + password + "@127.0.0.1:1/db?connect_timeout=2"
	d := launchEnv(t, cleanEnv("PAYMENTSD_DB="+url, "PAYMENTSD_LISTEN=127.0.0.1:0", "PAYMENTSD_HTTP_LISTEN="))
	if code := exitOf(t, d, 20*time.Second); code == 0 {
		t.Errorf("a database that does not answer: exit 0, want a failure:\n%s", d.stderr())
	}
	if d.stderr() == "" {
		t.Error("paymentsd failed without a word")
	}
	if strings.Contains(d.stderr(), password) {
		t.Errorf("the log holds the password of PAYMENTSD_DB:\n%s", d.stderr())
	}
	// The operator commands read PAYMENTSD_DB too, and say as little.
	r := runBounded(t, 20*time.Second, "", cleanEnv("PAYMENTSD_DB="+url), "record", "--principal", "p", "--key", "k")
	if r.code == 0 {
		t.Errorf("record on a database that does not answer: exit 0")
	}
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("record printed the password of PAYMENTSD_DB:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func TestSecret_TokensNeverLogged(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	const (
		valid   = "canary-valid-7f3a9c"
		invalid = "canary-invalid-b81e2d"
		next    = "canary-next-44c0aa"
		odd     = "canary-odd-\u00e9-91d2" // refused by its byte, over HTTP
	)
	writeInPlace(t, keys, 0o600, keyFile("alice", valid))
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--api-keys", keys, "--http-listen", "127.0.0.1:0")
	d.watching(t)
	base := "http://" + d.logAddr(t, "http listening") + "/v1/payment_intents"

	if a := d.create(withCreds(valid, "s-1"), seedRequest("1")); a.err != nil {
		t.Fatalf("valid token: %v", a.err)
	}
	if a := d.create(withCreds(invalid, "s-2"), seedRequest("1")); status.Code(a.err) != codes.Unauthenticated {
		t.Fatalf("invalid token: %v, want UNAUTHENTICATED", a.err)
	}
	if a := httpCall(t, "POST", base, seedBody, withHTTPKey(valid, "s-3")...); a.status != 201 {
		t.Errorf("valid token over HTTP: %d %s", a.status, a.body)
	}
	if a := httpCall(t, "POST", base, seedBody, withHTTPKey(invalid, "s-4")...); a.status != 401 {
		t.Errorf("invalid token over HTTP: %d %s, want 401", a.status, a.body)
	}
	if a := httpCall(t, "GET", base, "", bearerHeader(odd)...); a.status != 401 && a.status != 400 {
		t.Errorf("token with a non-ASCII byte over HTTP: %d %s, want 400 or 401", a.status, a.body)
	}
	if a := httpCall(t, "GET", base, "", "Authorization", "Bearer "+valid+" "+invalid); a.status != 401 && a.status != 400 {
		t.Errorf("two words after Bearer: %d %s, want 400 or 401", a.status, a.body)
	}

	// A reload: valid out, next in; then a broken file and SIGHUP.
	replaceByRename(t, keys, 0o600, keyFile("alice", next))
	d.waitLog(t, 2*time.Second, "api keys reloaded", map[string]any{"trigger": "file changed"})
	if a := d.create(withCreds(valid, "s-5"), seedRequest("1")); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("removed token: %v, want UNAUTHENTICATED", a.err)
	}
	if a := d.create(withCreds(next, "s-6"), seedRequest("1")); a.err != nil {
		t.Errorf("new token: %v", a.err)
	}
	replaceByRename(t, keys, 0o600, keyFile("alice", next)+valid+"\n") // a token pasted by mistake
	d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "file changed"})
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "SIGHUP"})

	if err := d.stop(t); err != nil { // every line is written once it has exited
		t.Errorf("stop: %v", err)
	}
	log := d.stderr()
	for _, secret := range []string{valid, invalid, next, odd, "canary-"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
}

func TestReload_TLS_BrokenFilesKeepCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := devcerts.NewCA("tls reload test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	first := serverPair(t, ca)
	if err := first.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--tls-cert", certFile, "--tls-key", keyFile, "--metrics-listen", "127.0.0.1:0")
	d.watching(t)
	metricsAddr := d.logAddr(t, "metrics listening")
	metrics := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	tlsErrors := func() float64 {
		t.Helper()
		resp, err := metrics.Get("https://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, `paymentsd_credential_reloads_total{file="tls",result="error"} `); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		t.Fatalf("no tls error counter in:\n%s", body)
		return 0
	}
	wantServed := func(p *devcerts.Pair, when string) {
		t.Helper()
		if got := servedSerial(t, d.addr, roots); got.Cmp(p.Cert.SerialNumber) != 0 {
			t.Errorf("%s: serial %x served, want %x", when, got, p.Cert.SerialNumber)
		}
	}
	// refused waits for a new refusal triggered by trigger whose error
	// says inErr.
	refusals := 0
	refused := func(trigger, inErr string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			lines := d.logLines("tls files not reloaded: the previous certificate stays in use")
			for _, line := range lines[refusals:] {
				if e, _ := line["err"].(string); line["trigger"] == trigger && strings.Contains(e, inErr) {
					refusals = len(lines)
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no refusal by %s saying %q logged:\n%s", trigger, inErr, d.stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// A certificate file that is not PEM.
	errs := tlsErrors()
	replaceByRename(t, certFile, 0o644, "not a certificate\n")
	refused("file changed", certFile)
	wantServed(first, "after a broken certificate file")
	if got := tlsErrors(); got <= errs {
		t.Errorf("tls error counter %v, was %v: the refusal is not counted", got, errs)
	}
	// SIGHUP with it still broken.
	d.cmd.Process.Signal(syscall.SIGHUP)
	refused("SIGHUP", certFile)
	wantServed(first, "after SIGHUP on a broken certificate file")

	// A good pair, but the key made writable by others: refused, naming
	// the mode, and the old pair stays.
	second := serverPair(t, ca)
	if err := second.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	d.waitLog(t, 2*time.Second, "tls certificate reloaded", map[string]any{"serial": second.Cert.SerialNumber.Text(16)})
	wantServed(second, "after a good pair")
	if err := os.Chmod(keyFile, 0o666); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	refused("SIGHUP", "0666")
	wantServed(second, "after the key was made world-writable")
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}

	// A key that is not the certificate's.
	third := serverPair(t, ca)
	replaceByRename(t, keyFile, 0o600, string(third.KeyPEM))
	refused("file changed", keyFile)
	wantServed(second, "after a key that is not the certificate's")
	replaceByRename(t, certFile, 0o644, string(third.CertPEM))
	d.waitLog(t, 2*time.Second, "tls certificate reloaded", map[string]any{"serial": third.Cert.SerialNumber.Text(16)})
	wantServed(third, "once the certificate follows its key")
	d.stillRunning(t)
}

func TestReload_APIKeys_SymlinkSwapped(t *testing.T) {
	// As Kubernetes updates a mounted secret: api-keys -> ..data/api-keys,
	// and ..data a link moved from one directory of the files to the next.
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	for _, v := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(secret, v), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeInPlace(t, filepath.Join(secret, "v1", "api-keys"), 0o600, keyFile("alice", "link-token-one"))
	writeInPlace(t, filepath.Join(secret, "v2", "api-keys"), 0o600, keyFile("alice", "link-token-two"))
	if err := os.Symlink("v1", filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(secret, "api-keys")
	if err := os.Symlink(filepath.Join("..data", "api-keys"), keys); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--api-keys", keys)
	d.watching(t)
	if c := d.authCode("link-token-one"); c != codes.OK {
		t.Fatalf("token of v1 at start: %v", c)
	}
	tmp := filepath.Join(secret, "..data_tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	swapped := time.Now()
	for {
		c1, c2 := d.authCode("link-token-one"), d.authCode("link-token-two")
		if c1 == codes.Unauthenticated && c2 == codes.OK {
			break
		}
		if time.Since(swapped) > time.Second {
			t.Fatalf("1s after the link moved: v1's token %v, v2's %v; want UNAUTHENTICATED and OK:\n%s", c1, c2, d.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.stillRunning(t)
}

func TestFIFO_APIKeys_ReplacedWhileRunning_RefusedNotHanging(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "fifo-token-one"))
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--api-keys", keys)
	d.watching(t)

	// A FIFO renamed over the file: refused at the next look, without
	// waiting for a writer.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, keys); err != nil {
		t.Fatal(err)
	}
	line := d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "file changed"})
	if e, _ := line["err"].(string); !strings.Contains(e, "FIFO") {
		t.Errorf("refusal %q does not say FIFO", e)
	}
	if c := d.authCode("fifo-token-one"); c != codes.OK {
		t.Errorf("previous token with a FIFO in place: %v, want OK", c)
	}
	// The reloads are not stuck: SIGHUP is answered, and a file put back
	// is read.
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "SIGHUP"})
	if err := os.Remove(keys); err != nil {
		t.Fatal(err)
	}
	writeInPlace(t, keys, 0o600, keyFile("alice", "fifo-token-two"))
	d.waitLog(t, 2*time.Second, "api keys reloaded", map[string]any{"trigger": "file changed"})
	if c := d.authCode("fifo-token-two"); c != codes.OK {
		t.Errorf("token of the file put back: %v, want OK", c)
	}
	if c := d.authCode("fifo-token-one"); c != codes.Unauthenticated {
		t.Errorf("previous token once the file is back: %v, want UNAUTHENTICATED", c)
	}
	d.stillRunning(t)
}

func TestWorldWritable_APIKeys_WhileRunning_PreviousKeysStay(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "ww-token-one"))
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--api-keys", keys)
	d.watching(t)
	// Someone else could now have written their own key in: refused.
	writeInPlace(t, keys, 0o666, keyFile("mallory", "ww-token-mallory"))
	line := d.waitLog(t, 2*time.Second, "api keys not reloaded: the previous keys stay in use", map[string]any{"trigger": "file changed"})
	if e, _ := line["err"].(string); !strings.Contains(e, "0666") {
		t.Errorf("refusal %q does not name the mode", e)
	}
	if c := d.authCode("ww-token-mallory"); c != codes.Unauthenticated {
		t.Errorf("token of a world-writable file: %v, want UNAUTHENTICATED", c)
	}
	if c := d.authCode("ww-token-one"); c != codes.OK {
		t.Errorf("previous token: %v, want OK", c)
	}
	d.stillRunning(t)
}

func TestEnv_Record_APIKeysFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "record-env-token"))
	dbPath := filepath.Join(dir, "paymentsd.db")
	d := startDaemon(t, dbPath, "--api-keys", keys)
	if a := d.create(withCreds("record-env-token", "order-env"), seedRequest("1")); a.err != nil {
		t.Fatal(a.err)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// The environment the server ran with, as an operator's shell has it.
	env := cleanEnv("PAYMENTSD_DB="+dbPath, "PAYMENTSD_API_KEYS="+keys)

	t.Run("token-stdin finds the principal in PAYMENTSD_API_KEYS", func(t *testing.T) {
		cmd := exec.Command(paymentsdBinary, "record", "--token-stdin", "--key", "order-env", "--json")
		cmd.Env = env
		cmd.Stdin = strings.NewReader("record-env-token")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("record --token-stdin: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `"alice"`) {
			t.Errorf("record --token-stdin did not find alice's record:\n%s", out)
		}
	})
	t.Run("principal given, PAYMENTSD_API_KEYS set", func(t *testing.T) {
		// PAYMENTSD_API_KEYS sets no flag the operator gave: record
		// --principal must not be refused for it.
		r := runBounded(t, 30*time.Second, "", env, "record", "--principal", "alice", "--key", "order-env", "--json")
		r.want(t, 0, `"alice"`)
	})
	t.Run("subcommand-only flags are not read from the environment", func(t *testing.T) {
		r := runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+dbPath, "PAYMENTSD_PRINCIPAL=alice", "PAYMENTSD_KEY=order-env"), "record")
		if r.code != 2 || !strings.Contains(r.stderr, "--key is required") {
			t.Errorf("record with PAYMENTSD_KEY and PAYMENTSD_PRINCIPAL only: exit %d, stderr %q; want 2, --key is required", r.code, r.stderr)
		}
	})
}

// heldProxy forwards TCP connections to target, but holds the first one
// until release is closed; accepted is closed when it arrives.
func heldProxy(t *testing.T, target string) (addr string, accepted, release chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted, release = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if first {
				first = false
				close(accepted)
				<-release
			}
			wg.Go(func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() {
					io.Copy(s, c)
					s.(*net.TCPConn).CloseWrite()
				}()
				io.Copy(c, s)
			})
		}
	})
	return ln.Addr().String(), accepted, release
}

// The server reads --api-keys first thing and watches it once it serves;
// a file replaced in between (while it connects to its database, which
// takes up to --db's timeout) must still be seen: the removed token must
// be refused, without a SIGHUP.
func TestReload_APIKeys_ChangedDuringStartup_Seen(t *testing.T) {
	dbURL, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, accepted, release := heldProxy(t, dbURL.Host)
	dbURL.Host = proxyAddr

	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	const old, next = "startup-token-old", "startup-token-next"
	writeInPlace(t, keys, 0o600, keyFile("alice", old))
	d := launch(t, dbURL.String(), "--api-keys", keys)
	select {
	case <-accepted: // the keys are loaded: that comes before the database
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not connect to its database:\n%s", d.stderr())
	}
	if n := len(d.logLines("paymentsd listening")); n != 0 {
		t.Fatal("paymentsd listens before its database answers; the test is wrong")
	}
	replaceByRename(t, keys, 0o600, keyFile("alice", next))
	changed := time.Now()
	close(release)
	d.addr = waitListening(t, d)
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d.client = paymentsv1.NewPaymentIntentServiceClient(conn)

	var cOld, cNext codes.Code
	for time.Since(changed) < 3*time.Second {
		cOld, cNext = d.authCode(old), d.authCode(next)
		if cOld == codes.Unauthenticated && cNext == codes.OK {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("3s after the file was replaced (during startup): removed token %v, new token %v; want UNAUTHENTICATED and OK. "+
		"The watcher takes its first look at the file after the server has read it, so a change in between is never seen:\n%s",
		cOld, cNext, d.stderr())
}

// As TestReload_APIKeys_ChangedDuringStartup_Seen, for the TLS files: a
// certificate replaced while the server connects to its database must be
// served once it listens.
func TestReload_TLS_ChangedDuringStartup_Seen(t *testing.T) {
	dbURL, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, accepted, release := heldProxy(t, dbURL.Host)
	dbURL.Host = proxyAddr

	dir := t.TempDir()
	ca, err := devcerts.NewCA("startup test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	if err := serverPair(t, ca).WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	d := launch(t, dbURL.String(), "--tls-cert", certFile, "--tls-key", keyFile)
	select {
	case <-accepted:
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not connect to its database:\n%s", d.stderr())
	}
	next := serverPair(t, ca)
	if err := next.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	close(release)
	d.addr = waitListening(t, d)
	var got *big.Int
	for time.Since(changed) < 3*time.Second {
		if got = servedSerial(t, d.addr, roots); got.Cmp(next.Cert.SerialNumber) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("3s after the pair was replaced (during startup): serial %x served, want %x. "+
		"The watcher takes its first look at the files after the server has read them, so a change in between is never seen:\n%s",
		got, next.Cert.SerialNumber, d.stderr())
}

// SIGHUP means "read the credential files again"; one that comes while
// the server starts (here: while it connects to its database) must not
// kill it, as Go's default action for SIGHUP does until signal.Notify.
func TestReload_SIGHUPDuringStartup_NotFatal(t *testing.T) {
	dbURL, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, accepted, release := heldProxy(t, dbURL.Host)
	dbURL.Host = proxyAddr
	keys := filepath.Join(t.TempDir(), "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "hup-token"))
	d := launch(t, dbURL.String(), "--api-keys", keys)
	select {
	case <-accepted:
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not connect to its database:\n%s", d.stderr())
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	select {
	case <-d.exited:
		t.Fatalf("SIGHUP while starting killed paymentsd (%v):\n%s", d.err, d.stderr())
	case addr := <-d.listening():
		t.Logf("listening on %s after a SIGHUP while starting", addr)
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not start listening:\n%s", d.stderr())
	}
}
