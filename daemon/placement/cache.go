package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pageSize is how many keys one read of the load asks for, so that a
// directory of millions of principals loads in answers of bounded size.
const pageSize = 1000

// The key spaces under the prefix.
const (
	placementKeys = "placement/"
	podKeys       = "pods/"
)

// value is a placement as etcd stores it. Later fields (a move under way)
// are ignored by readers that do not know them.
type value struct {
	Pod     string `json:"pod"`
	Move    *Move  `json:"move,omitempty"`
	Cleanup string `json:"cleanup,omitempty"`
}

// weighted is a pod's weight and the revision that wrote it.
type weighted struct {
	weight   int
	revision int64
}

// cache is what a replica knows of the directory: every placement and
// weight as of revision rev.
type cache struct {
	mu      sync.RWMutex
	placed  map[string]Placement
	weights map[string]weighted
	rev     int64
}

func (c *cache) lookup(principal string) (Placement, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.placed[principal]
	return p, ok
}

func (c *cache) revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// weightsOf returns the weight of each of pods: 1 unless the directory
// says otherwise.
func (c *cache) weightsOf(pods []string) map[string]int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	w := make(map[string]int, len(pods))
	for _, p := range pods {
		w[p] = 1
		if e, ok := c.weights[p]; ok {
			w[p] = e.weight
		}
	}
	return w
}

// remember keeps a placement that Place learned from etcd. One at or
// below the watch's revision is left to the watch, which has already seen
// it and anything that came after it.
func (c *cache) remember(p Placement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Revision > c.rev && p.Revision > c.placed[p.Principal].Revision {
		c.placed[p.Principal] = p
	}
}

// replace takes a freshly loaded snapshot at revision rev. Placements
// remembered from writes after rev stay.
func (c *cache) replace(s *cache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.placed {
		if p.Revision > s.rev {
			s.placed[k] = p
		}
	}
	c.placed, c.weights, c.rev = s.placed, s.weights, max(c.rev, s.rev)
}

// apply applies one key's change at revision rev, unless what is known of
// the key is as new. A key it cannot read is reported and skipped.
func (c *cache) apply(prefix string, kv *mvccpb.KeyValue, deleted bool, rev int64) error {
	rest := strings.TrimPrefix(string(kv.Key), prefix)
	if esc, ok := strings.CutPrefix(rest, placementKeys); ok {
		principal, err := url.PathUnescape(esc)
		if err != nil || c.placed[principal].Revision >= rev {
			return err
		}
		if deleted {
			delete(c.placed, principal)
			return nil
		}
		p, err := decode(principal, kv)
		if err == nil {
			c.placed[principal] = p
		}
		return err
	}
	if pod, ok := strings.CutPrefix(rest, podKeys); ok && c.weights[pod].revision < rev {
		if deleted {
			delete(c.weights, pod)
			return nil
		}
		var w struct{ Weight *int }
		if err := json.Unmarshal(kv.Value, &w); err != nil || w.Weight == nil {
			return fmt.Errorf("placement: pod %s: weight %q: want {\"weight\":N}", pod, kv.Value)
		}
		c.weights[pod] = weighted{max(*w.Weight, 0), rev}
	}
	return nil
}

// decode reads a placement's value.
func decode(principal string, kv *mvccpb.KeyValue) (Placement, error) {
	var v value
	if err := json.Unmarshal(kv.Value, &v); err != nil || v.Pod == "" {
		return Placement{}, fmt.Errorf("placement: %s: value %q: want {\"pod\":\"...\"}", principal, kv.Value)
	}
	return Placement{Principal: principal, Pod: v.Pod, Move: v.Move, Cleanup: v.Cleanup, Revision: kv.ModRevision}, nil
}

// reload reads the whole directory at one revision, in pages, and makes
// it the cache.
func (d *Directory) reload(ctx context.Context) error {
	s := &cache{placed: map[string]Placement{}, weights: map[string]weighted{}}
	key, end := d.cfg.Prefix, clientv3.GetPrefixRangeEnd(d.cfg.Prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if s.rev > 0 {
			opts = append(opts, clientv3.WithRev(s.rev))
		}
		rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
		resp, err := d.cli.Get(rctx, key, opts...)
		cancel()
		if err != nil {
			return err
		}
		if s.rev == 0 {
			s.rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := s.apply(d.cfg.Prefix, kv, false, kv.ModRevision); err != nil {
				d.log.Warn("placement: skipping a key it cannot read", "key", string(kv.Key), "err", err)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	d.cache.replace(s)
	return nil
}

// follow watches the directory until ctx ends. A broken watch starts
// again from the last revision applied; one whose revision etcd has
// compacted away reloads the directory first.
func (d *Directory) follow(ctx context.Context) {
	defer close(d.done)
	for ctx.Err() == nil {
		err := d.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			d.log.Info("placement: watch compacted away, reloading the directory", "revision", d.cache.revision())
			d.reloads.Add(1)
			err = d.reload(ctx)
		}
		if err != nil {
			d.watchErr.Store(&err)
			d.log.Warn("placement: watching the directory failed, again in 1s", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watch applies the directory's changes after the cache's revision until
// the watch breaks. A member that loses its leader ends it (require
// leader), so that a replica does not follow a member that no longer
// learns anything.
func (d *Directory) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Created notify: the watch's first answer, events or not, says it
	// follows again.
	ch := d.cli.Watch(wctx, d.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(d.cache.revision()+1),
		clientv3.WithCreatedNotify())
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return err
		}
		d.watchErr.Store(nil)
		d.applyEvents(resp.Events)
	}
	return errors.New("placement: the watch ended")
}

// applyEvents applies a watch answer's changes in order.
func (d *Directory) applyEvents(events []*clientv3.Event) {
	c := &d.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range events {
		rev := ev.Kv.ModRevision
		if err := c.apply(d.cfg.Prefix, ev.Kv, ev.Type == clientv3.EventTypeDelete, rev); err != nil {
			d.log.Warn("placement: skipping a change it cannot read", "key", string(ev.Kv.Key), "err", err)
		}
		c.rev = max(c.rev, rev)
	}
}
