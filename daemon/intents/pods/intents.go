package pods

import (
	"context"
	"errors"
	"fmt"
	"time"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// intentRouter is the router's payment intents: each in its owner's pod.
// Inside a request's Tx, the intent goes to the Tx's pod, where its record
// is; outside one, to the owner's placement.
type intentRouter struct{ *Router }

var _ interface {
	server.IntentStore
	server.IntentScanner
	FindIntent(ctx context.Context, id string) (server.FoundIntent, error)
} = intentRouter{}

// writer is the pod a write of owner's goes to: the Tx's, or the
// owner's, placed if new. Inside a Tx, owner must be the claim's scope, as
// the principal is in paymentsd: a pod keeps a principal's intents with
// its records.
func (r intentRouter) writer(ctx context.Context, owner string) (Pod, error) {
	if in, ok := txIn(ctx); ok {
		if in.scope != owner {
			return Pod{}, fmt.Errorf("pods: a write of %q's intents in a request of %q's", owner, in.scope)
		}
		return in.pod, nil
	}
	return r.place(ctx, owner)
}

// reader is the pod a read of owner's goes to, and false if the owner was
// never placed, and so has no intents. Inside a Tx of owner's, it is the
// Tx's pod, which sees the Tx's writes.
func (r intentRouter) reader(ctx context.Context, owner string) (Pod, bool, error) {
	if in, ok := txIn(ctx); ok && in.scope == owner {
		return in.pod, true, nil
	}
	return r.resolve(ctx, owner)
}

func (r intentRouter) CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error {
	p, err := r.writer(ctx, owner)
	if err != nil {
		return err
	}
	return p.Backend.Intents().CreateIntent(ctx, owner, key, pi)
}

// holder is the pod of owner's intent id: ErrNotFound if owner was never
// placed.
func (r intentRouter) holder(ctx context.Context, owner, id string) (Pod, error) {
	p, ok, err := r.reader(ctx, owner)
	if err == nil && !ok {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return p, err
}

func (r intentRouter) GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error) {
	p, err := r.holder(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return p.Backend.Intents().GetIntent(ctx, owner, id)
}

func (r intentRouter) UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error) {
	p, err := r.holder(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return p.Backend.Intents().UpdateIntent(ctx, owner, id, update)
}

func (r intentRouter) ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error) {
	p, ok, err := r.reader(ctx, owner)
	if err != nil || !ok {
		return nil, nil, err
	}
	return p.Backend.Intents().ListIntents(ctx, owner, after, limit)
}

// ScanIntents scans owner's intents in its pod, for the console.
func (r intentRouter) ScanIntents(ctx context.Context, owner string, from time.Time, before server.Position, fn func(server.FoundIntent) (bool, error)) error {
	p, ok, err := r.reader(ctx, owner)
	if err != nil || !ok {
		return err
	}
	s, ok := p.Backend.Intents().(server.IntentScanner)
	if !ok {
		return fmt.Errorf("pod %s cannot scan intents", p.Name)
	}
	return s.ScanIntents(ctx, owner, from, before, fn)
}

// FindIntent looks the id up in every pod at once: an id names no pod.
// A copy left in a pod its owner is not placed on is not an answer. A pod
// that fails fails the lookup, unless another found it.
func (r intentRouter) FindIntent(ctx context.Context, id string) (server.FoundIntent, error) {
	found := make([]server.FoundIntent, len(r.pods))
	err := r.each(func(i int, p Pod) error {
		f, ok := p.Backend.Intents().(interface {
			FindIntent(context.Context, string) (server.FoundIntent, error)
		})
		if !ok {
			return nil
		}
		var err error
		found[i], err = f.FindIntent(ctx, id)
		if errors.Is(err, server.ErrNotFound) {
			return nil
		}
		return err
	})
	for i, f := range found {
		if f.Intent == nil {
			continue
		}
		if pl, ok := r.dir.Lookup(f.Owner); !ok || pl.Pod == r.pods[i].Name {
			return f, nil
		}
	}
	if err != nil {
		return server.FoundIntent{}, err
	}
	return server.FoundIntent{}, fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
}
