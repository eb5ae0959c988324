package robustness

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/wire"
)

// A pause takes a worker over only if the paused process holds a durable
// claim when it stops, and another replica is asked the same request once
// the claim's lease has run out; the random workload, whose creates are
// mostly replays of finished keys, rarely meets both. So on a run with
// durable claims and replicas, a pause goes with a burst: before SIGSTOP,
// burstClients clients send creates of fresh keys to the server to be
// paused, back to back, so that some are between claim and completion when
// it stops; once their lease has run out, each create still unanswered is
// sent again to another replica, which takes it over; after SIGCONT, the
// paused workers must fail to complete (ABORTED,
// IDEMPOTENCY_ATTEMPT_SUPERSEDED) and never overwrite the newer attempt.
// Every call is recorded in the history, as the clients' are.

const (
	burstClients = 8
	// burstKeyBase is where the bursts' keys start, far above the pools'.
	burstKeyBase = 10_000_000
)

// burst is one pause's burst of creates.
type burst struct {
	c       *cluster
	target  int
	stopped atomic.Bool
	wg      sync.WaitGroup

	mu      sync.Mutex
	pending map[int]*op // per burst client: its call not yet answered
}

// startBurst starts the burst's clients on server target and returns once
// each has sent a create.
func (c *cluster) startBurst(target int) *burst {
	b := &burst{c: c, target: target, pending: map[int]*op{}}
	p := c.proxies[target]
	var started sync.WaitGroup
	for j := range burstClients {
		ep, err := dialEndpoint(p[0].Addr(), p[1].Addr())
		if err != nil {
			c.t.Fatal(err)
		}
		ep.timeout = durableCallTimeout
		started.Add(1)
		b.wg.Go(func() {
			defer ep.close()
			first := true
			for !b.stopped.Load() {
				o := c.burstCreate(c.clientBase+j, j)
				b.mu.Lock()
				b.pending[j] = o
				b.mu.Unlock()
				if first {
					started.Done()
					first = false
				}
				o.Call = c.h.now()
				ep.do(o)
				o.Return = c.h.now()
				c.h.add(o)
				b.mu.Lock()
				delete(b.pending, j)
				b.mu.Unlock()
			}
			if first {
				started.Done()
			}
		})
	}
	started.Wait()
	time.Sleep(300 * time.Millisecond) // past their first calls, which dial, into their stride
	return b
}

// burstCreate is a create of a fresh key, alternating principals, recorded
// as used so that the finish asks it again.
func (c *cluster) burstCreate(client, j int) *op {
	n := int(c.burstKeys.Add(1))
	k := burstKeyBase + n
	o := &op{Client: client, Face: []string{"grpc", "http"}[n%2], Kind: opCreate, Principal: n % len(tokens), Key: keyName(k)}
	c.w.mu.Lock()
	c.w.used[[2]int{o.Principal, k}] = true
	c.w.mu.Unlock()
	return o
}

// takeOver sends every create still unanswered by the paused server to
// server other, until each is answered or the pause is about to end, and
// returns how many there were and how many were answered with a fresh run.
func (b *burst) takeOver(other int, until time.Time) (n, fresh int) {
	b.stopped.Store(true)
	b.mu.Lock()
	var stuck []*op
	for _, o := range b.pending {
		stuck = append(stuck, o)
	}
	b.mu.Unlock()
	p := b.c.proxies[other]
	ep, err := dialEndpoint(p[0].Addr(), p[1].Addr())
	if err != nil {
		b.c.t.Fatal(err)
	}
	defer ep.close()
	n = len(stuck)
	for _, s := range stuck {
		for time.Now().Before(until) {
			o := &op{Client: b.c.clientBase + burstClients, Face: s.Face, Kind: opCreate, Principal: s.Principal, Key: s.Key, Body: s.Body}
			o.Call = b.c.h.now()
			ep.do(o)
			o.Return = b.c.h.now()
			b.c.h.add(o)
			if o.Code == codes.OK && !o.Replayed {
				fresh++
			}
			if !(o.Code == codes.Aborted && o.Reason == wire.ReasonKeyInUse) && !o.Unknown {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return n, fresh
}

// wait waits for the burst's clients, whose last calls end after SIGCONT.
func (b *burst) wait() { b.wg.Wait() }
