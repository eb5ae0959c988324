package main

import (
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
)

// chaosProxy forwards loopback TCP to paymentsd and breaks connections on
// purpose: it drops responses after the server has handled the request, or
// resets connections at random moments.
type chaosProxy struct {
	lis    net.Listener
	target string
	// dropResponse: a write from the server of at least 100 bytes (a
	// response; settings, pings and window updates are smaller) is, half the
	// time, swallowed and the connection closed.
	dropResponse bool
	// resetAfter: each connection is reset (RST) after a random lifetime up
	// to this long.
	resetAfter time.Duration

	broken atomic.Int64 // responses dropped or connections reset
}

func startProxy(t *testing.T, target string, configure func(*chaosProxy)) *chaosProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{lis: lis, target: target}
	configure(p)
	go p.serve()
	t.Cleanup(func() { lis.Close() })
	return p
}

func (p *chaosProxy) serve() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		go p.relay(client.(*net.TCPConn))
	}
}

func (p *chaosProxy) relay(client *net.TCPConn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func(reset bool) {
		once.Do(func() {
			if reset {
				client.SetLinger(0) // RST instead of FIN
			}
			client.Close()
			server.Close()
		})
	}
	if p.resetAfter > 0 {
		time.AfterFunc(rand.N(p.resetAfter), func() {
			p.broken.Add(1)
			closeBoth(true)
		})
	}
	go func() {
		io.Copy(server, client)
		closeBoth(false)
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n >= 100 && p.dropResponse && rand.IntN(2) == 0 {
			p.broken.Add(1)
			closeBoth(false)
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				closeBoth(false)
				return
			}
		}
		if err != nil {
			closeBoth(false)
			return
		}
	}
}

// TestE2E_ClientRetriesThroughChaos_ExactlyOneIntentEach creates intents
// through proxies that lose responses after the server handled them, or
// reset connections, with the client interceptor retrying: every caller
// gets its intent, and no create ran twice.
func TestE2E_ClientRetriesThroughChaos_ExactlyOneIntentEach(t *testing.T) {
	for _, tc := range []struct {
		name      string
		configure func(*chaosProxy)
	}{
		{"responses dropped after handling", func(p *chaosProxy) { p.dropResponse = true }},
		{"connections reset", func(p *chaosProxy) { p.resetAfter = 20 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"))
			proxy := startProxy(t, d.addr, tc.configure)
			conn, err := grpc.NewClient(proxy.lis.Addr().String(),
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
					BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond,
				}}),
				grpc.WithUnaryInterceptor(interceptor.MustUnaryClientInterceptor(
					interceptor.WithClientMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
					interceptor.WithMaxAttempts(50),
					interceptor.WithBackoff(2*time.Millisecond, 50*time.Millisecond),
				)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := paymentsv1.NewPaymentIntentServiceClient(conn)

			const creates, workers = 200, 8
			var (
				mu  sync.Mutex
				ids = map[string]string{} // intent id -> amount
				wg  sync.WaitGroup
				nxt atomic.Int64
			)
			for range workers {
				wg.Go(func() {
					for {
						n := nxt.Add(1)
						if n > creates {
							return
						}
						amount := strconv.FormatInt(n, 10)
						resp, err := client.CreatePaymentIntent(withCreds("chaos", ""), seedRequest(amount))
						if err != nil {
							t.Errorf("create %s: %v", amount, err)
							continue
						}
						mu.Lock()
						ids[resp.PaymentIntent.Id] = amount
						mu.Unlock()
					}
				})
			}
			wg.Wait()

			if proxy.broken.Load() == 0 {
				t.Fatal("the proxy broke nothing: the test proved nothing")
			}
			intents := d.list(t, "chaos")
			perAmount := map[string]int{}
			for _, pi := range intents {
				perAmount[pi.Amount]++
				if ids[pi.Id] == "" {
					t.Errorf("intent %s (amount %s) was created but never returned", pi.Id, pi.Amount)
				}
			}
			for amount, n := range perAmount {
				if n != 1 {
					t.Errorf("amount %s: %d intents", amount, n)
				}
			}
			if len(intents) != creates || len(ids) != creates {
				t.Errorf("%d intents exist and %d were returned, want %d and %d", len(intents), len(ids), creates, creates)
			}
			t.Logf("%d creates, %d broken by the proxy, %d intents, 0 duplicates", creates, proxy.broken.Load(), len(intents))
		})
	}
}
