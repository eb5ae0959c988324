package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Place returns the principal's placement, placing it first if it is
// new. A known principal is answered from memory. A new one is placed by
// one compare-and-set in etcd, which keeps the placement already there
// if another replica was first. The pod is chosen by Choose over the pods
// this replica serves. A placement on a pod this replica does not serve
// is returned with ErrUnknownPod. Once a request to etcd has failed, new
// principals are refused with ErrUnreachable at once, without asking,
// until etcd answers again.
func (d *Directory) Place(ctx context.Context, principal string) (Placement, error) {
	if p, ok := d.Lookup(principal); ok {
		return d.served(p)
	}
	if principal == "" {
		return Placement{}, errors.New("placement: empty principal")
	}
	// One request per principal at a time in this replica; it runs apart
	// from ctx, so that one caller leaving does not fail the others.
	ch := d.flights.DoChan(principal, func() (any, error) { return d.place(principal) })
	select {
	case r := <-ch:
		if r.Err != nil {
			return Placement{}, r.Err
		}
		return d.served(r.Val.(Placement))
	case <-ctx.Done():
		return Placement{}, ctx.Err()
	}
}

// place places a principal not found in memory.
func (d *Directory) place(principal string) (Placement, error) {
	if p, ok := d.Lookup(principal); ok { // the watch brought it meanwhile
		return p, nil
	}
	pod, ok := Choose(principal, d.cache.weightsOf(d.cfg.Pods), nil)
	if !ok {
		return Placement{}, fmt.Errorf("%w: %v", ErrNoPod, d.cfg.Pods)
	}
	if err := d.breaker.refusal(); err != nil {
		d.refused.Add(1)
		return Placement{}, err
	}
	d.places.Add(1)
	p, err := d.create(principal, pod)
	if errors.Is(err, ErrUnreachable) {
		d.failures.Add(1)
		d.failed(err)
		return Placement{}, err
	}
	d.answered()
	if err != nil {
		return Placement{}, err
	}
	d.cache.remember(p)
	return p, nil
}

// create puts the placement on pod unless the key exists, in which case
// it returns the one there: If(CreateRevision==0) Then(Put) Else(Get).
func (d *Directory) create(principal, pod string) (Placement, error) {
	key := d.cfg.Prefix + placementKeys + url.PathEscape(principal)
	val, err := json.Marshal(value{Pod: pod})
	if err != nil {
		return Placement{}, err
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return Placement{}, fmt.Errorf("%w: placing %s: %w", ErrUnreachable, principal, err)
	}
	if resp.Succeeded {
		return Placement{Principal: principal, Pod: pod, Revision: resp.Header.Revision}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return Placement{}, fmt.Errorf("placement: %s exists and reads as %d keys", key, len(kvs))
	}
	return decode(principal, kvs[0])
}

// served returns p, with ErrUnknownPod if this replica does not serve its
// pod.
func (d *Directory) served(p Placement) (Placement, error) {
	if !d.serves[p.Pod] {
		return p, fmt.Errorf("%w: %s is placed on %q, this replica serves %v", ErrUnknownPod, p.Principal, p.Pod, d.cfg.Pods)
	}
	return p, nil
}

// Resolve returns the principal's placement for a read, and false if it
// has none: a principal never placed has nothing stored. A known
// principal is answered from memory. An unknown one is read from etcd by
// one linearizable read, so that a principal another replica placed a
// moment ago, before the watch brought it here, is not taken for new.
// While etcd is unreachable it fails with ErrUnreachable, never guessing.
func (d *Directory) Resolve(ctx context.Context, principal string) (Placement, bool, error) {
	if p, ok := d.Lookup(principal); ok {
		return p, true, nil
	}
	if err := d.breaker.refusal(); err != nil {
		d.refused.Add(1)
		return Placement{}, false, err
	}
	key := d.cfg.Prefix + placementKeys + url.PathEscape(principal)
	rctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	d.resolves.Add(1)
	resp, err := d.cli.Get(rctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		return Placement{}, false, ctx.Err() // the caller left: no verdict on etcd
	case err != nil:
		d.failures.Add(1)
		err = fmt.Errorf("%w: reading %s: %w", ErrUnreachable, principal, err)
		d.failed(err)
		return Placement{}, false, err
	}
	d.answered()
	if len(resp.Kvs) == 0 {
		return Placement{}, false, nil
	}
	p, err := decode(principal, resp.Kvs[0])
	if err != nil {
		return Placement{}, false, err
	}
	d.cache.remember(p)
	return p, true, nil
}
