// Package pods spreads paymentsd's data over several PostgreSQL
// databases, its pods. Each principal lives in exactly one: all of its
// idempotency records and payment intents are there, so a create's
// claim, intent and completion stay one transaction on one database, and
// a principal's list is one query on one pod. Where each principal lives
// is the placement directory's to say (package placement): a principal is
// placed on its first keyed call, and never moves by itself.
//
// A Router is an intents.Backend over the pods. Each call that names a
// principal goes to its pod. The calls that name none (the sweep, the
// operator's lists and lookups) go to every pod at once. A principal the
// directory cannot place or find right now is refused with a
// storage.ScopeUnavailableError, which callers are told as UNAVAILABLE
// with a retry delay; every other principal is served meanwhile.
package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/storage"
)

// RetryAfter is the retry delay of a principal refused because the
// directory cannot place or find it: the directory probes etcd this often.
const RetryAfter = time.Second

// Directory is where principals live: a *placement.Directory.
type Directory interface {
	Lookup(principal string) (placement.Placement, bool)
	Place(ctx context.Context, principal string) (placement.Placement, error)
	Resolve(ctx context.Context, principal string) (placement.Placement, bool, error)
	Health() error
	Stats() placement.Stats
	Close() error
}

// Pod is one database of the router, by name.
type Pod struct {
	Name    string
	Backend intents.Backend
}

// Router is the pods as one intents.Backend.
type Router struct {
	pods   []Pod
	byName map[string]Pod
	dir    Directory
	log    *slog.Logger

	mu     sync.Mutex
	health map[string]error // each pod's last Check
}

var (
	_ intents.Backend        = (*Router)(nil)
	_ intents.Records        = records{}
	_ storage.Watcher        = records{}
	_ storage.KeyFinder      = records{}
	_ storage.ReleaseHistory = records{}
)

// New returns the router of pods, placed by dir. It closes them and dir
// when it is closed. log may be nil.
func New(pods []Pod, dir Directory, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{pods: pods, byName: map[string]Pod{}, dir: dir, log: log, health: map[string]error{}}
	for _, p := range pods {
		r.byName[p.Name] = p
	}
	return r
}

// Records are the idempotency records, each in its scope's pod.
func (r *Router) Records() intents.Records { return records{r} }

// Intents are the payment intents, each in its owner's pod.
func (r *Router) Intents() server.IntentStore { return intentRouter{r} }

// String names the pods and their databases, never with a password.
func (r *Router) String() string {
	names := make([]string, len(r.pods))
	for i, p := range r.pods {
		names[i] = p.Name + "=" + p.Backend.String()
	}
	return "pods " + strings.Join(names, " ")
}

// Check checks every pod at once. It is nil while at least one pod
// serves: a pod down refuses only its own principals. Each pod's state is
// kept for Health.
func (r *Router) Check(ctx context.Context) error {
	errs := make([]error, len(r.pods))
	var wg sync.WaitGroup
	for i, p := range r.pods {
		wg.Go(func() { errs[i] = p.Backend.Check(ctx) })
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	serving := 0
	for i, p := range r.pods {
		if was := r.health[p.Name]; (was == nil) != (errs[i] == nil) {
			if errs[i] != nil {
				r.log.Error("pod down: its principals are refused, the others served", "pod", p.Name, "err", errs[i])
			} else {
				r.log.Info("pod serves again", "pod", p.Name)
			}
		}
		r.health[p.Name] = errs[i]
		if errs[i] == nil {
			serving++
		}
	}
	if serving == 0 {
		return fmt.Errorf("every pod is down: %w", errors.Join(errs...))
	}
	return nil
}

// Health returns each pod's state as of the last Check: nil while it
// serves.
func (r *Router) Health() map[string]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := make(map[string]error, len(r.pods))
	for _, p := range r.pods {
		h[p.Name] = r.health[p.Name]
	}
	return h
}

// Directory is where the router's principals live.
func (r *Router) Directory() Directory { return r.dir }

// DirectoryHealth is the directory's: nil while it is in touch with etcd.
func (r *Router) DirectoryHealth() error { return r.dir.Health() }

// DirectoryStats count what the directory asked of etcd.
func (r *Router) DirectoryStats() placement.Stats { return r.dir.Stats() }

// Backends are the router's pods' databases, by pod name.
func (r *Router) Backends() map[string]intents.Backend {
	b := make(map[string]intents.Backend, len(r.pods))
	for _, p := range r.pods {
		b[p.Name] = p.Backend
	}
	return b
}

// CountRecords counts every pod's records, for the metrics.
func (r *Router) CountRecords() (float64, error) {
	var sum float64
	var errs []error
	for _, p := range r.pods {
		n, err := p.Backend.CountRecords()
		sum += n
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
		}
	}
	return sum, errors.Join(errs...)
}

// ClosedAttrs are none: each pod's database says nothing more at close.
func (r *Router) ClosedAttrs() []slog.Attr { return nil }

// Close closes the directory, then every pod.
func (r *Router) Close() error {
	errs := []error{r.dir.Close()}
	for _, p := range r.pods {
		if err := p.Backend.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// place returns the pod of a principal, placing it if it is new. A
// principal the directory cannot place now is refused for now.
func (r *Router) place(ctx context.Context, principal string) (Pod, error) {
	pl, err := r.dir.Place(ctx, principal)
	if err != nil {
		return Pod{}, r.away(ctx, principal, err)
	}
	if pl.Move != nil {
		// Frozen: nothing new of it is begun until the move ends. What is
		// in progress finishes on its pod, which the move waits for.
		return Pod{}, &storage.ScopeUnavailableError{Scope: principal, Why: "moving to another pod", RetryAfter: RetryAfter}
	}
	return r.podOf(pl)
}

// resolve returns the pod of a principal for a read, and false if it was
// never placed: then it has nothing stored anywhere.
func (r *Router) resolve(ctx context.Context, principal string) (Pod, bool, error) {
	pl, ok, err := r.dir.Resolve(ctx, principal)
	if err != nil || !ok {
		return Pod{}, false, r.away(ctx, principal, err)
	}
	p, err := r.podOf(pl)
	return p, err == nil, err
}

// podOf is the pod of a placement, which the directory has checked this
// replica serves.
func (r *Router) podOf(pl placement.Placement) (Pod, error) {
	p, ok := r.byName[pl.Pod]
	if !ok {
		return Pod{}, &storage.ScopeUnavailableError{Scope: pl.Principal, Why: "placed on a pod this replica does not serve", RetryAfter: RetryAfter}
	}
	return p, nil
}

// away turns the directory's failure into the principal's refusal for
// now. The caller's own end is returned as it is; nil stays nil.
func (r *Router) away(ctx context.Context, principal string, err error) error {
	var why string
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err
	case errors.Is(err, placement.ErrUnreachable):
		why = "the placement directory is unreachable"
	case errors.Is(err, placement.ErrUnknownPod):
		why = "placed on a pod this replica does not serve"
	case errors.Is(err, placement.ErrNoPod):
		why = "no pod takes new principals"
	default:
		why = "the placement directory failed"
	}
	return &storage.ScopeUnavailableError{Scope: principal, Why: why, RetryAfter: RetryAfter, Err: err}
}
