package main

// Tests of the bounds on answers a client does not read: the real binary,
// with API keys, in a 512 MiB memory cgroup, attacked over loopback by
// clients that grant no flow-control window (gRPC) or read slowly (HTTP),
// while another client creates an intent every second.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/testkit/rawgrpc"
)

// The tokens of the unread-answers tests: the client that creates during
// an attack, and the customer whose token one attack uses.
const (
	creatorToken = "creator-token"
	listerToken  = "lister-token"
)

// peakRSSBound is the most resident memory an attack may cost.
const peakRSSBound = 300 << 20

// startKeyed starts paymentsd as s says, with API keys for the creator
// and the customer, in a 512 MiB memory cgroup, with metrics.
func startKeyed(t *testing.T, s spec) *daemon {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	line := func(principal, token string) string { return principal + " sha256:" + sha256Hex(token) + "\n" }
	if err := os.WriteFile(keys, []byte(line("creator", creatorToken)+line("lister", listerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.db, s.metrics, s.args = filepath.Join(dir, "paymentsd.db"), true, append([]string{"--api-keys", keys}, s.args...)
	d := start(t, s)
	memoryCgroup(t, d.cmd.Process.Pid, 512<<20)
	if os.Getenv("PAYMENTSD_TEST_BINARY") == "" { // an earlier build does not follow it
		waitFor(t, 30*time.Second, "paymentsd to follow its cgroup's memory limit", func() bool {
			return strings.Contains(d.stderr(), `"cgroup_limit_bytes":536870912`)
		})
	}
	return d
}

// creates makes a create every second on a connection of its own until
// stop is closed, as a careful client does: a create refused UNAVAILABLE
// (nothing ran) is retried with the same key, backing off, for up to 10
// s. It reports how many succeeded, how many at the first try, and the
// slowest, retries included.
func creates(t *testing.T, d *daemon, stop <-chan struct{}) (result func() (ok, first, all int, worst time.Duration)) {
	t.Helper()
	conn := d.newConn(t, nil)
	client := paymentsv1.NewPaymentIntentServiceClient(conn)
	// A client already connected, as one is when an attack begins.
	if _, err := client.CreatePaymentIntent(withCreds(creatorToken, "before"), seedRequest("100")); err != nil {
		t.Fatalf("a create before the attack: %v", err)
	}
	var ok, first, all int
	var worst time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			began := time.Now()
			tries, err := createRetrying(client, creatorToken, fmt.Sprintf("during-%d", i))
			all++
			switch {
			case err != nil:
				t.Logf("create %d during the attack, after %d tries: %v", i, tries, err)
			case tries == 1:
				first++
				fallthrough
			default:
				ok++
				worst = max(worst, time.Since(began))
			}
		}
	}()
	return func() (int, int, int, time.Duration) { <-done; return ok, first, all, worst }
}

// createRetrying creates with key until it succeeds, for up to 10 s. It
// retries what a client of an idempotent API retries: a refusal that
// says nothing ran (UNAVAILABLE, RESOURCE_EXHAUSTED), a call the server
// cancelled to make room (CANCELLED or DEADLINE_EXCEEDED while the
// client's own deadline stands), a key still in flight (ABORTED). The
// same key makes each retry safe.
func createRetrying(client paymentsv1.PaymentIntentServiceClient, token, key string) (tries int, err error) {
	ctx, cancel := context.WithTimeout(withCreds(token, key), 10*time.Second)
	defer cancel()
	backoff := 20 * time.Millisecond
	for tries = 1; ; tries++ {
		_, err = client.CreatePaymentIntent(ctx, seedRequest("100"))
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
		default:
			return tries, err
		}
		if ctx.Err() != nil {
			return tries, err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// unreadAttack is conns clients at once that each open a connection
// granting no window, send streams calls on it and read nothing. When the
// server closes one, it connects again. It returns how many connections
// the server closed.
func unreadAttack(ctx context.Context, addr string, conns, streams int, call func(*rawgrpc.Unreader) error) (closed int64) {
	var n atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				u, err := rawgrpc.Unread(ctx, addr, nil)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for i := 0; i < streams && call(u) == nil; i++ {
				}
				select {
				case <-u.Closed():
					n.Add(1)
				case <-ctx.Done():
				}
				u.Close()
			}
		})
	}
	wg.Wait()
	return n.Load()
}

// surviveUnread runs an attack for 15 s against d while creating every
// second, then checks that paymentsd lived within its memory bound, that
// every create succeeded, and that the limits closed or refused the
// attackers.
func surviveUnread(t *testing.T, d *daemon, what string, attack func(ctx context.Context) int64) {
	t.Helper()
	stop := make(chan struct{})
	result := creates(t, d, stop)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	closed := attack(ctx)
	close(stop)
	ok, first, all, worst := result()
	d.wantRunning(t, "under the attack")
	peak := peakRSS(t, d.cmd.Process.Pid)
	m := d.scrape(t)
	held := 0.0
	for _, r := range []string{"answer_evicted", "unread_refused", "unread_closed", "slow_reader_evicted", "write_timeout", "anonymous_limit"} {
		for _, l := range []string{"grpc", "http"} {
			held += m[fmt.Sprintf(`paymentsd_listener_refusals_total{listener=%q,reason=%q}`, l, r)]
		}
	}
	t.Logf("%s: peak RSS %.1f MiB; creates %d of %d (%d at the first try), the slowest %v; %d attacking connections closed; %v refusals and closes of unread answers",
		what, float64(peak)/(1<<20), ok, all, first, worst.Round(time.Millisecond), closed, held)
	if peak > peakRSSBound {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, peakRSSBound>>20)
	}
	// A create slowed by the attack delays the next: on a loaded machine
	// fewer than 15 are made, each of which must succeed.
	if ok != all || all < 5 {
		t.Errorf("%d of %d creates during the attack succeeded, want all, and at least 5", ok, all)
	}
	if held == 0 {
		t.Error("no attacking connection refused or closed")
	}
}

// fields is a raw call's header fields, with a customer's token if given.
func rawFields(addr, path, token string) []rawgrpc.Field {
	if token == "" {
		return rawgrpc.Fields(addr, path)
	}
	return rawgrpc.Fields(addr, path, rawgrpc.Field{Name: "authorization", Value: "Bearer " + token})
}

func TestUnread_Reflection_WithoutACredential(t *testing.T) {
	d := startKeyed(t, spec{args: []string{"--reflection"}})
	// The service's file with its comments: some 12 KB an answer.
	msg, _ := proto.Marshal(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "payments.v1.PaymentIntentService"}})
	fields := rawFields(d.addr, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "")
	surviveUnread(t, d, "150 connections x 256 unread reflection answers", func(ctx context.Context) int64 {
		return unreadAttack(ctx, d.addr, 150, 256, func(u *rawgrpc.Unreader) error { return u.Call(fields, msg) })
	})
}

func TestUnread_HealthChecks_WithoutACredential(t *testing.T) {
	d := startKeyed(t, spec{})
	fields := rawFields(d.addr, "/grpc.health.v1.Health/Check", "")
	surviveUnread(t, d, "100 connections x 256 unread health checks", func(ctx context.Context) int64 {
		return unreadAttack(ctx, d.addr, 100, 256, func(u *rawgrpc.Unreader) error { return u.Call(fields, nil) })
	})
}

func TestUnread_ListsOf1000Intents_WithACustomersToken(t *testing.T) {
	d := startKeyed(t, spec{})
	createIntents(t, d, listerToken, 1000)
	msg, _ := proto.Marshal(&paymentsv1.ListPaymentIntentsRequest{PageSize: 1000})
	fields := rawFields(d.addr, paymentsv1.PaymentIntentService_ListPaymentIntents_FullMethodName, listerToken)
	surviveUnread(t, d, "8 connections x 256 unread pages of 1,000 intents", func(ctx context.Context) int64 {
		return unreadAttack(ctx, d.addr, 8, 256, func(u *rawgrpc.Unreader) error { return u.Call(fields, msg) })
	})
}

// createIntents creates n intents of token's principal, 16 at a time.
func createIntents(t *testing.T, d *daemon, token string, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := d.client.CreatePaymentIntent(withCreds(token, fmt.Sprintf("seed-%d", i)), seedRequest("100")); err != nil {
					t.Errorf("seed create %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// 100 HTTP/1.1 clients ask for a page of 1,000 intents and read nothing:
// each answer is cut off after --http-write-timeout.
func TestUnread_HTTPSlowReaders(t *testing.T) {
	d := startKeyed(t, spec{http: true, args: []string{"--http-write-timeout", "3s"}})
	createIntents(t, d, listerToken, 1000)
	api := d.httpAddr
	surviveUnread(t, d, "100 HTTP/1.1 clients reading nothing of a 1,000-intent page", func(ctx context.Context) int64 {
		var closed atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if slowHTTPReader(ctx, api) {
						closed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return closed.Load()
	})
	// A reader whose 16 pages the server, short of CPU, has not all made
	// within the attack may never block its writes; most do.
	m := d.scrape(t)
	timeouts := m[`paymentsd_listener_refusals_total{listener="http",reason="write_timeout"}`]
	t.Logf("%v answers cut off after --http-write-timeout", timeouts)
	if timeouts == 0 {
		t.Error("no answer cut off after --http-write-timeout")
	}
}

// slowHTTPReader asks for pages of 1,000 intents, 16 requests at once on
// one connection, with a small receive buffer, and reads nothing until
// ctx ends. It reports whether the server had closed the connection. (One page, 420 KB, fits in the kernel's socket
// buffers here; 16 do not, and then the server's write blocks.)
func slowHTTPReader(ctx context.Context, addr string) bool {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		time.Sleep(10 * time.Millisecond)
		return false
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	for range 16 {
		fmt.Fprintf(c, "GET /v1/payment_intents?page_size=1000 HTTP/1.1\r\nHost: paymentsd\r\nAuthorization: Bearer %s\r\n\r\n", listerToken)
	}
	// Read nothing for the whole attack: a server short of CPU may take
	// seconds to make its first page, which must still find its reader
	// asleep. Then drain a moment to see whether the server closed it.
	<-ctx.Done()
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}
