package main

// Credential files and SIGHUP while the server starts: the server reads
// its files first thing and watches them once it serves, and connects to
// its database in between (held here by a proxy). A change then must be
// seen, and a SIGHUP then must not kill it.

import (
	"io"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

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
			wg.Go(func() { forward(c, target) })
		}
	})
	return ln.Addr().String(), accepted, release
}

// forward copies between c and a new connection to target, both ways.
func forward(c net.Conn, target string) {
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
}

// startHeld starts paymentsd with args on a new PostgreSQL database
// reached through a heldProxy, and returns once its first connection is
// held there: it has read its credential files by then. release lets the
// connection through; serving waits for the rest.
func startHeld(t *testing.T, args ...string) (d *daemon, release func()) {
	t.Helper()
	dbURL, err := url.Parse(postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, accepted, held := heldProxy(t, dbURL.Host)
	dbURL.Host = proxyAddr
	d = start(t, spec{db: dbURL.String(), args: args, noWait: true})
	select {
	case <-accepted: // the files are loaded: that comes before the database
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not connect to its database:\n%s", d.stderr())
	}
	return d, func() { close(held) }
}

// The server reads --api-keys first thing and watches it once it serves;
// a file replaced in between (while it connects to its database, which
// takes up to --db's timeout) must still be seen: the removed token must
// be refused, without a SIGHUP.
func TestReload_APIKeys_ChangedDuringStartup_Seen(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "api-keys")
	const old, next = "startup-token-old", "startup-token-next"
	writeInPlace(t, keys, 0o600, keyFile("alice", old))
	d, release := startHeld(t, "--api-keys", keys)
	if n := len(d.lines("paymentsd listening")); n != 0 {
		t.Fatal("paymentsd listens before its database answers; the test is wrong")
	}
	replaceByRename(t, keys, 0o600, keyFile("alice", next))
	changed := time.Now()
	release()
	d.serving(t)
	if cOld, cNext, ok := d.waitTokens(changed, 3*time.Second, old, next); !ok {
		t.Errorf("3s after the file was replaced (during startup): removed token %v, new token %v; want UNAUTHENTICATED and OK. "+
			"The watcher takes its first look at the file after the server has read it, so a change in between is never seen:\n%s",
			cOld, cNext, d.stderr())
	}
}

// As TestReload_APIKeys_ChangedDuringStartup_Seen, for the TLS files: a
// certificate replaced while the server connects to its database must be
// served once it listens.
func TestReload_TLS_ChangedDuringStartup_Seen(t *testing.T) {
	certs := newCertSet(t, "startup test CA")
	roots := certs.pool(t)
	d, release := startHeld(t, certs.serverArgs()...)
	next := certs.rotate(t)
	changed := time.Now()
	release()
	d.serving(t)
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
	keys := filepath.Join(t.TempDir(), "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "hup-token"))
	d, release := startHeld(t, "--api-keys", keys)
	d.hup(t)
	time.Sleep(200 * time.Millisecond)
	release()
	if err := d.awaitServing(t); err != nil {
		t.Fatalf("SIGHUP while starting killed paymentsd (%v):\n%s", d.err, d.stderr())
	}
	t.Logf("listening on %s after a SIGHUP while starting", d.addr)
}
