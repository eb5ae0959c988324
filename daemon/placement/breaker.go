package placement

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// probeEvery is how often a replica cut off from etcd asks whether it
// answers again.
const probeEvery = time.Second

// breaker remembers that etcd failed. New principals are then refused at
// once: each would otherwise wait out RequestTimeout, holding a call
// slot, while etcd is down. A probe closes it when etcd answers again.
type breaker struct {
	mu      sync.Mutex
	err     error     // the last failure; nil while etcd answers
	since   time.Time // when etcd began to fail
	probing bool
	closed  bool // the directory is closed: no probe starts
	probes  sync.WaitGroup
}

// refusal is the error of a request refused without asking, or nil while
// etcd answers.
func (b *breaker) refusal() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		return nil
	}
	return fmt.Errorf("%w: not answering for %v: %w", ErrUnreachable, time.Since(b.since).Round(time.Millisecond), b.err)
}

// failed opens the breaker and starts the probe, unless it runs.
func (d *Directory) failed(err error) {
	b := &d.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.since = time.Now()
		d.log.Warn("placement: etcd unreachable; new principals refused, known ones served", "err", err)
	}
	b.err = err
	if !b.probing && !b.closed {
		b.probing = true
		b.probes.Go(d.probe)
	}
}

// answered closes the breaker: etcd answered a request.
func (d *Directory) answered() {
	b := &d.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		d.log.Info("placement: etcd answers again; placing new principals", "after", time.Since(b.since).Round(time.Millisecond))
	}
	b.err = nil
}

// probe asks etcd every probeEvery until it answers, the breaker closes
// or the directory does. A linearizable read needs a quorum, as a
// placement does.
func (d *Directory) probe() {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
		case <-tick.C:
		}
		b := &d.breaker
		b.mu.Lock()
		if b.err == nil || d.ctx.Err() != nil {
			b.probing = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.RequestTimeout)
		_, err := d.cli.Get(ctx, d.cfg.Prefix+podKeys, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			d.answered()
		} else if d.ctx.Err() == nil {
			d.failed(err)
		}
	}
}

// stopProbing keeps new probes from starting and waits for the one
// running, at Close.
func (b *breaker) stopProbing() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.probes.Wait()
}
