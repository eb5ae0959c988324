package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Move is a move of a principal to another pod, as its placement records
// it while it runs: the mover's state, so that a mover that died can be
// run again and finish it, or undo it.
type Move struct {
	ID    string    `json:"id"`
	To    string    `json:"to"`
	Step  string    `json:"step"` // the last step done
	By    string    `json:"by"`   // who runs it
	Since time.Time `json:"since"`
}

// ErrChanged is returned by Swap when the placement is no longer the one
// given: another writer changed it first.
var ErrChanged = errors.New("placement: changed meanwhile")

// ErrLocked is returned by Lock when another mover holds the principal.
var ErrLocked = errors.New("placement: another mover holds the principal")

// Read returns the principal's placement as etcd has it now, and false if
// it has none. It reads past memory: for a mover, who must act on the
// latest.
func (d *Directory) Read(ctx context.Context, principal string) (Placement, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.cli.Get(rctx, d.key(principal))
	if err != nil {
		return Placement{}, false, fmt.Errorf("%w: reading %s: %w", ErrUnreachable, principal, err)
	}
	if len(resp.Kvs) == 0 {
		return Placement{}, false, nil
	}
	p, err := decode(principal, resp.Kvs[0])
	return p, err == nil, err
}

// Swap replaces the placement old, as read, by next, in one
// compare-and-set on old's revision. It returns next as written, or the
// placement found and ErrChanged if another writer changed it first.
func (d *Directory) Swap(ctx context.Context, old, next Placement) (Placement, error) {
	key := d.key(old.Principal)
	val, err := json.Marshal(value{Pod: next.Pod, Move: next.Move, Cleanup: next.Cleanup})
	if err != nil {
		return Placement{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", old.Revision)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return Placement{}, fmt.Errorf("%w: changing %s: %w", ErrUnreachable, old.Principal, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return Placement{}, fmt.Errorf("%w: %s has no placement", ErrChanged, old.Principal)
		}
		now, err := decode(old.Principal, kvs[0])
		return now, errors.Join(ErrChanged, err)
	}
	next.Principal, next.Revision = old.Principal, resp.Header.Revision
	d.cache.remember(next)
	return next, nil
}

// Lock makes holder the principal's only mover, for as long as it lives:
// the lock is on a lease of ttl that this process keeps alive, and that
// ends with it. It fails with ErrLocked, naming the holder, when another
// mover holds it. unlock ends it.
func (d *Directory) Lock(ctx context.Context, principal, holder string, ttl time.Duration) (unlock func(), err error) {
	s, err := concurrency.NewSession(d.cli, concurrency.WithTTL(max(int(ttl.Seconds()), 5)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("%w: a lease for the mover: %w", ErrUnreachable, err)
	}
	key := d.cfg.Prefix + "movers/" + url.PathEscape(principal)
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(s.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	switch {
	case err != nil:
		s.Close()
		return nil, fmt.Errorf("%w: locking %s: %w", ErrUnreachable, principal, err)
	case !resp.Succeeded:
		s.Close()
		held := "someone"
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			held = string(kvs[0].Value)
		}
		return nil, fmt.Errorf("%w: %s is being moved by %s", ErrLocked, principal, held)
	}
	return func() { s.Close() }, nil // revoking the lease deletes the key
}

// key is the principal's key in etcd.
func (d *Directory) key(principal string) string {
	return d.cfg.Prefix + placementKeys + url.PathEscape(principal)
}
