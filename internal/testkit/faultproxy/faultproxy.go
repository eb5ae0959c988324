// Package faultproxy is a loopback TCP proxy that cuts the connections it
// carries. Tests use it to see what a client does when the network drops
// it mid-conversation. The client may be a paymentsd replica and its
// PostgreSQL pool, or a gRPC client retrying through its interceptor. A
// cut is a reset rather than a clean close, at a moment the client does
// not choose. It may come right after the target has answered, the answer
// lost.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its own loopback address to a target.
// Its methods are safe for concurrent use. Close ends all its goroutines.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close: ends dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	conns    map[*pair]struct{} // live connections
	cuts     int
	stopCuts chan struct{} // closes to stop the running CutEvery loop, if any
	cutOn    []byte        // see CutWhenClientSends; nil when unarmed
	lifetime time.Duration // see LimitLifetime; 0 when unlimited
	dropMin  int           // see DropReplies
	dropP    float64       // see DropReplies; 0 when off
}

// pair is one proxied connection: the client's side and the target's.
type pair struct {
	client, server *net.TCPConn
	once           sync.Once
}

// New returns a proxy to target (host:port) listening on 127.0.0.1:0.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*pair]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, where clients connect instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of file descriptors): pause, as
			// net/http does, rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// Counted here, while accept itself is counted, so that Close's Wait
		// never races an Add.
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

// serve dials the target for client, and copies both ways until both end
// or the pair is cut. A target that cannot be reached resets the client,
// as a network that drops it would.
func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	var d net.Dialer
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		reset(client)
		return
	}
	pr := &pair{client: client, server: s.(*net.TCPConn)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.reset()
		return
	}
	p.conns[pr] = struct{}{}
	lifetime := p.lifetime
	p.mu.Unlock()

	var copies sync.WaitGroup
	copies.Add(2)
	go pr.copy(&copies, cutter{conn: pr.server, p: p, pr: pr}, pr.client)
	go pr.copy(&copies, dropper{conn: pr.client, p: p, pr: pr}, pr.server)
	if lifetime > 0 {
		p.cutAfter(pr, rand.N(lifetime), &copies)
	} else {
		copies.Wait()
	}

	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
	pr.client.Close()
	pr.server.Close()
}

// copy forwards src to dst. An EOF is passed on as a half-close. A clean
// shutdown by either end then looks the same through the proxy. Any other
// error, a cut or a reset by one end, resets both.
func (pr *pair) copy(wg *sync.WaitGroup, dst halfCloser, src *net.TCPConn) {
	defer wg.Done()
	if _, err := io.Copy(dst, src); err != nil {
		pr.reset()
		return
	}
	dst.CloseWrite()
}

type halfCloser interface {
	io.Writer
	CloseWrite() error
}

// cutter writes what a client sends to its server. It cuts the pair right
// after a write that holds the armed pattern (see CutWhenClientSends).
type cutter struct {
	conn *net.TCPConn // not embedded: io.Copy must not bypass Write through its ReadFrom
	p    *Proxy
	pr   *pair
}

var errCut = errors.New("faultproxy: cut")

func (c cutter) Write(b []byte) (int, error) {
	n, err := c.conn.Write(b)
	if err == nil && c.p.cutOnMatch(c.pr, b) {
		err = errCut
	}
	return n, err
}

func (c cutter) CloseWrite() error { return c.conn.CloseWrite() }

// dropper writes what a server sends to its client. When DropReplies picks
// a write, it cuts the pair instead, the bytes never sent.
type dropper struct {
	conn *net.TCPConn // not embedded, as in cutter
	p    *Proxy
	pr   *pair
}

func (d dropper) Write(b []byte) (int, error) {
	if d.p.dropOnReply(d.pr, b) {
		return 0, errCut
	}
	return d.conn.Write(b)
}

func (d dropper) CloseWrite() error { return d.conn.CloseWrite() }

// dropOnReply cuts pr, if it is still live, when DropReplies picks b.
func (p *Proxy) dropOnReply(pr *pair, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropP <= 0 || len(b) < p.dropMin || rand.Float64() >= p.dropP {
		return false
	}
	return p.cutLiveLocked(pr)
}

// DropReplies makes the proxy swallow, from now on, reads of a target of
// at least minLen bytes. It picks each with probability chance (1:
// always), and cuts that connection instead of forwarding the bytes. The
// target has handled the request; its client never gets the answer. For
// gRPC, 100 bytes tells a response from the HTTP/2 settings, pings and
// window updates, which are smaller. A chance of 0 stops it.
func (p *Proxy) DropReplies(minLen int, chance float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropMin, p.dropP = minLen, chance
}

// LimitLifetime makes the proxy cut each connection it accepts from now on
// after a random lifetime, uniform in [0, limit). No connection lives
// long, and each dies at a moment its client does not choose. A limit of 0
// leaves the connections accepted afterwards alone.
func (p *Proxy) LimitLifetime(limit time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifetime = limit
}

// cutAfter waits for copies, and cuts pr if it is still live after life.
func (p *Proxy) cutAfter(pr *pair, life time.Duration, copies *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		copies.Wait()
		close(done)
	}()
	t := time.NewTimer(life)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.mu.Lock()
		p.cutLiveLocked(pr)
		p.mu.Unlock()
		<-done
	}
}

// cutLiveLocked cuts pr and counts it, and reports whether it cut. It
// leaves a pair that has ended or been cut, and cuts none while closing.
func (p *Proxy) cutLiveLocked(pr *pair) bool {
	if _, live := p.conns[pr]; !live || p.closed {
		return false
	}
	p.cutLocked(pr)
	return true
}

// cutOnMatch cuts pr and disarms the pattern if b holds it.
func (p *Proxy) cutOnMatch(pr *pair, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cutOn == nil || !bytes.Contains(b, p.cutOn) {
		return false
	}
	p.cutOn = nil
	p.cutLocked(pr)
	return true
}

// CutWhenClientSends makes the proxy cut the first connection whose client
// sends pattern, right after forwarding the bytes that hold it. The target
// gets the request, the client never its answer. It fires once. A pattern
// split across two reads is not seen.
func (p *Proxy) CutWhenClientSends(pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOn = bytes.Clone(pattern)
}

// reset closes both sides abruptly. SO_LINGER 0 makes Close send RST, so
// each end sees "connection reset", not an orderly EOF.
func (pr *pair) reset() {
	pr.once.Do(func() {
		reset(pr.client)
		reset(pr.server)
	})
}

func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// CutEvery makes the proxy reset a random live connection at random
// intervals averaging d. They are exponentially distributed, so cuts come
// at moments no client can predict. A d of 0 stops cutting. Resets are
// abrupt on both sides: SetLinger(0), then Close.
func (p *Proxy) CutEvery(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopCuts != nil {
		close(p.stopCuts)
		p.stopCuts = nil
	}
	if d <= 0 || p.closed {
		return
	}
	stop := make(chan struct{})
	p.stopCuts = stop
	p.wg.Add(1)
	go p.cutLoop(d, stop)
}

func (p *Proxy) cutLoop(d time.Duration, stop chan struct{}) {
	defer p.wg.Done()
	t := time.NewTimer(0)
	t.Stop()
	for {
		t.Reset(time.Duration(rand.ExpFloat64() * float64(d)))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		p.mu.Lock()
		var victim *pair
		if n := len(p.conns); n > 0 {
			i := rand.IntN(n)
			for pr := range p.conns {
				if i == 0 {
					victim = pr
					break
				}
				i--
			}
		}
		p.cutLocked(victim)
		p.mu.Unlock()
	}
}

// CutAll resets every live connection now.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.conns {
		p.cutLocked(pr)
	}
}

// cutLocked resets pr, if any, and counts it. It removes pr from conns, so
// that serve's own delete is a no-op and no pair is counted twice.
func (p *Proxy) cutLocked(pr *pair) {
	if pr == nil {
		return
	}
	delete(p.conns, pr)
	p.cuts++
	pr.reset()
}

// Cuts returns how many connections the proxy has cut.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops listening and resets every live connection, not counted as
// cuts. It returns once all the proxy's goroutines have ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.stopCuts != nil {
		close(p.stopCuts)
		p.stopCuts = nil
	}
	for pr := range p.conns {
		pr.reset()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.cancel()
	p.wg.Wait()
	return err
}
