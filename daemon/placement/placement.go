// Package placement is the directory of where each principal lives: which
// pod, one of several PostgreSQL clusters, holds its records and intents.
// The directory is kept in etcd, so that every replica sees the same
// placement, and a new principal is placed by one compare-and-set that
// every replica racing on it converges on.
//
// Under a prefix, /paymentsd/ by default, etcd holds
//
//	placement/<principal, path-escaped>  {"pod":"a"}      where the principal lives
//	pods/<pod>                           {"weight":1}     absent is 1; 0 places no one there
//
// A placement is created once and never changes by itself: it has no
// lease and no TTL, and adding a pod moves no one.
//
// A Directory keeps every placement in memory: it loads them at one
// revision and follows a watch from the next. A known principal is looked
// up without asking etcd, so a replica cut off from etcd keeps serving
// the principals it knows and refuses only new ones.
package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/connectivity"
)

// DefaultPrefix is the etcd prefix of the directory when Config has none.
const DefaultPrefix = "/paymentsd/"

// The errors of Open and Place.
var (
	// ErrUnreachable is returned when etcd did not answer in time, and
	// for new principals refused without asking after that, until a probe
	// (every second) finds etcd answering again.
	ErrUnreachable = errors.New("placement: etcd unreachable")
	// ErrUnknownPod is returned by Place when the principal is placed on
	// a pod this replica does not serve.
	ErrUnknownPod = errors.New("placement: placed on a pod this replica does not serve")
	// ErrNoPod is returned by Place for a new principal when every pod
	// this replica serves has weight 0.
	ErrNoPod = errors.New("placement: every pod weighs 0")
)

// Placement is where one principal lives.
type Placement struct {
	Principal string
	Pod       string
	// Move is a move of the principal to another pod under way: its new
	// claims are refused until it ends. Nil when none is.
	Move *Move
	// Cleanup names the pod a finished move left copies on, until the
	// mover deletes them.
	Cleanup string
	// Revision is the etcd revision that last wrote the placement: the
	// token that a change of it must compare.
	Revision int64
}

// Config says which etcd to use and which pods this replica serves.
type Config struct {
	Endpoints []string // etcd client URLs
	Prefix    string   // DefaultPrefix when empty; ends with "/"
	Pods      []string // the pods this replica serves, and so may place on
	// DialTimeout bounds the connection to etcd at Open; 5s when zero.
	DialTimeout time.Duration
	// RequestTimeout bounds each request to etcd; 2s when zero. A new
	// principal waits at most this long when etcd does not answer.
	RequestTimeout time.Duration
	// Logger receives the directory's lines and the etcd client's; nil
	// discards them.
	Logger *slog.Logger
}

// Stats count what the directory asked of etcd.
type Stats struct {
	Places   uint64 // compare-and-sets sent by Place
	Resolves uint64 // reads sent by Resolve, for principals not in memory
	Failures uint64 // of them, those etcd did not answer
	Refused  uint64 // unknown principals refused without asking, etcd having just failed
	Reloads  uint64 // reads of the whole directory after Open's, the watch's revision compacted away
}

// Directory is the placement directory of one replica.
type Directory struct {
	cfg     Config
	cli     *clientv3.Client
	log     *slog.Logger
	serves  map[string]bool
	cache   cache
	flights singleflight.Group
	breaker breaker

	places, resolves, failures, refused, reloads atomic.Uint64
	watchErr                                     atomic.Pointer[error] // the watch's last failure, nil while it follows

	ctx       context.Context // ends at Close
	stop      context.CancelFunc
	done      chan struct{} // closed when the watch has stopped
	closeOnce sync.Once
}

// Open connects to etcd, loads every placement and weight at one
// revision, and follows the directory from there until Close. It fails
// when etcd cannot be read: a replica that cannot know where its
// principals live does not start.
func Open(ctx context.Context, c Config) (*Directory, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		// A member that hangs with its connection open is left after 15s.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zapToSlog(c.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	d := &Directory{cfg: c, cli: cli, log: c.Logger, serves: map[string]bool{}, done: make(chan struct{})}
	for _, p := range c.Pods {
		d.serves[p] = true
	}
	if err := d.reload(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: loading %s: %w", ErrUnreachable, c.Prefix, err)
	}
	d.ctx, d.stop = context.WithCancel(context.Background())
	go d.follow(d.ctx)
	return d, nil
}

// withDefaults fills in the defaults and refuses what cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(c.Endpoints) == 0:
		return c, errors.New("placement: no etcd endpoints")
	case !strings.HasSuffix(c.Prefix, "/"):
		// "/paymentsd" would also hold the keys of "/paymentsd2/".
		return c, fmt.Errorf("placement: prefix %q does not end with /", c.Prefix)
	case len(c.Pods) == 0:
		return c, errors.New("placement: no pods to serve")
	}
	seen := map[string]bool{}
	for _, p := range c.Pods {
		if p == "" || strings.ContainsAny(p, "/\x00") || seen[p] {
			return c, fmt.Errorf("placement: pod name %q: empty, repeated, or with / or NUL", p)
		}
		seen[p] = true
	}
	return c, nil
}

// Lookup returns the principal's placement from memory, whatever its
// pod: it never asks etcd.
func (d *Directory) Lookup(principal string) (Placement, bool) {
	return d.cache.lookup(principal)
}

// Health is nil while the directory is in touch with etcd. Otherwise it
// is an error wrapping ErrUnreachable: the last request failed, the
// watch is broken, or no member can be connected to. Known principals
// are served all the same.
func (d *Directory) Health() error {
	if err := d.breaker.refusal(); err != nil {
		return err
	}
	if err := d.watchErr.Load(); err != nil {
		return fmt.Errorf("%w: watch: %w", ErrUnreachable, *err)
	}
	if d.cli.ActiveConnection().GetState() == connectivity.TransientFailure {
		return fmt.Errorf("%w: no member of %v can be connected to", ErrUnreachable, d.cfg.Endpoints)
	}
	return nil
}

// Stats returns what Place has asked of etcd so far.
func (d *Directory) Stats() Stats {
	return Stats{Places: d.places.Load(), Resolves: d.resolves.Load(), Failures: d.failures.Load(), Refused: d.refused.Load(), Reloads: d.reloads.Load()}
}

// Close stops following the directory and closes the etcd client.
// Lookup keeps answering from memory; Place fails.
func (d *Directory) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.stop()
		d.breaker.stopProbing()
		<-d.done
		err = d.cli.Close()
	})
	return err
}
