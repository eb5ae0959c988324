package pods

import (
	"context"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// records are the router's idempotency records: each in its scope's pod.
type records struct{ *Router }

// Claim claims in the pod of the key's scope, placing a new one.
func (r records) Claim(ctx context.Context, req storage.ClaimRequest) (storage.Outcome, *storage.Record, error) {
	p, err := r.place(ctx, req.Key.Scope)
	if err != nil {
		return 0, nil, err
	}
	return p.Backend.Records().Claim(ctx, req)
}

// ClaimTx claims in the pod of the key's scope, placing a new one. The
// handler's writes go to the same pod, whatever the directory says by
// then: the Tx's context carries it (see podTx).
func (r records) ClaimTx(ctx context.Context, req storage.ClaimRequest, d storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	p, err := r.place(ctx, req.Key.Scope)
	if err != nil {
		return 0, nil, nil, err
	}
	outcome, rec, tx, err := p.Backend.Records().ClaimTx(ctx, req, d)
	if tx != nil {
		tx = podTx{Tx: tx, in: txPlace{pod: p, scope: req.Key.Scope}}
	}
	return outcome, rec, tx, err
}

// Renew renews the claim in its scope's pod.
func (r records) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	p, err := r.claimed(ctx, key)
	if err != nil {
		return err
	}
	return p.Backend.Records().Renew(ctx, key, claim)
}

// Complete completes the claim in its scope's pod.
func (r records) Complete(ctx context.Context, key storage.RecordKey, done *storage.Record) error {
	p, err := r.claimed(ctx, key)
	if err != nil {
		return err
	}
	return p.Backend.Records().Complete(ctx, key, done)
}

// claimed is the pod of a key claimed before, so placed.
func (r *Router) claimed(ctx context.Context, key storage.RecordKey) (Pod, error) {
	p, ok, err := r.resolve(ctx, key.Scope)
	if err == nil && !ok {
		err = &storage.ScopeUnavailableError{Scope: key.Scope, Why: "claimed, yet placed nowhere"}
	}
	return p, err
}

// Get reads the record in its scope's pod; a scope never placed has none.
func (r records) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	p, ok, err := r.resolve(ctx, k.Scope)
	if err != nil || !ok {
		return nil, err
	}
	return p.Backend.Records().Get(ctx, k)
}

// Release releases the key in its scope's pod; a scope never placed has
// no record to release.
func (r records) Release(ctx context.Context, key storage.RecordKey, now time.Time, by string, seen storage.Seen) (*storage.Record, error) {
	p, ok, err := r.resolve(ctx, key.Scope)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, storage.ErrNoRecord
	}
	return p.Backend.Records().Release(ctx, key, now, by, seen)
}

// Releases are the key's releases, kept in its scope's pod.
func (r records) Releases(ctx context.Context, key storage.RecordKey) ([]storage.ReleaseEntry, error) {
	p, ok, err := r.resolve(ctx, key.Scope)
	if err != nil || !ok {
		return nil, err
	}
	h, isHistory := p.Backend.Records().(storage.ReleaseHistory)
	if !isHistory {
		return nil, nil
	}
	return h.Releases(ctx, key)
}

// Watch watches the key in its scope's pod, if that pod's store can. It
// asks only memory: a scope not known here yet is left to the
// interceptor's poll.
func (r records) Watch(key storage.RecordKey) (<-chan struct{}, func()) {
	if pl, ok := r.dir.Lookup(key.Scope); ok {
		if p, err := r.podOf(pl); err == nil {
			if w, ok := p.Backend.Records().(storage.Watcher); ok {
				return w.Watch(key)
			}
		}
	}
	return nil, func() {} // a nil channel never closes
}

// podTx is a pod's Tx. Its context names the pod and the scope, so that
// the handler's writes go to the database of its claim.
type podTx struct {
	storage.Tx
	in txPlace
}

// txPlace is where a Tx is: its pod, and the scope of its claim.
type txPlace struct {
	pod   Pod
	scope string
}

type txKey struct{}

func (t podTx) Context(parent context.Context) context.Context {
	return context.WithValue(t.Tx.Context(parent), txKey{}, t.in)
}

// txIn is where the Tx that ctx carries is, if it carries one.
func txIn(ctx context.Context) (txPlace, bool) {
	in, ok := ctx.Value(txKey{}).(txPlace)
	return in, ok
}

// Claimant is who this process claims as: the first pod's. Give every
// pod the same (pgstore.Options.ClaimantID), so that each claim's owner
// names the process whichever pod holds it.
func (r records) Claimant() storage.Claimant {
	if c, ok := r.pods[0].Backend.Records().(interface{ Claimant() storage.Claimant }); ok {
		return c.Claimant()
	}
	return storage.Claimant{}
}
