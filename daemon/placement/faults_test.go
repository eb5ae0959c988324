package placement_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPlace_LeaderKilled_StillPlaces: with etcd's leader killed, the
// other two members elect one and new principals are placed; those
// placed before are served from memory throughout.
func TestPlace_LeaderKilled_StillPlaces(t *testing.T) {
	c := etcdtest.Start(t, 3)
	d := open(t, c, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := d.Place(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Member(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	if p, err := d.Place(ctx, "before"); err != nil || p != before {
		t.Errorf("Place(before) with the leader killed = %+v, %v; want %+v from memory", p, err, before)
	}
	// A caller retries what the election refuses, as a client retries
	// UNAVAILABLE.
	after := placeEventually(ctx, t, d, "after")
	if got := stored(t, c, placement.DefaultPrefix, "after"); got.Version != 1 || got.CreateRevision != after.Revision {
		t.Errorf("after in etcd: version %d created at %d, want version 1 created at %d", got.Version, got.CreateRevision, after.Revision)
	}
}

// TestPlace_EtcdUnreachable_KnownServed_NewRefusedAtOnce: with every
// member killed, or every member paused, a replica serves the principals
// it knows; a new principal is refused with ErrUnreachable once etcd has
// not answered, and the next new one is refused at once, without asking.
// With etcd back, new principals are placed again and Health is nil.
func TestPlace_EtcdUnreachable_KnownServed_NewRefusedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		down, back func(*etcdtest.Member) error
	}{
		{"killed", (*etcdtest.Member).Kill, (*etcdtest.Member).Start},
		{"paused", (*etcdtest.Member).Pause, (*etcdtest.Member).Resume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdtest.Start(t, 3)
			d := openConfig(t, placement.Config{Endpoints: c.Endpoints(), Pods: []string{"a", "b"}, RequestTimeout: time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			known, err := d.Place(ctx, "known")
			if err != nil {
				t.Fatal(err)
			}
			each(t, c, tc.down)
			refusedWhileDown(ctx, t, d, known)
			each(t, c, tc.back)
			placeEventually(ctx, t, d, "new")
			for d.Health() != nil && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			if err := d.Health(); err != nil {
				t.Errorf("Health with etcd back: %v", err)
			}
		})
	}
}

// refusedWhileDown checks a replica cut off from etcd: known is served
// from memory; a new principal is refused with ErrUnreachable; the next
// one, right after, is refused without a request to etcd.
func refusedWhileDown(ctx context.Context, t *testing.T, d *placement.Directory, known placement.Placement) {
	t.Helper()
	if p, ok := d.Lookup("known"); !ok || p != known {
		t.Errorf("Lookup(known) = %+v, %v; want %+v", p, ok, known)
	}
	if p, err := d.Place(ctx, "known"); err != nil || p != known {
		t.Errorf("Place(known) = %+v, %v; want %+v from memory", p, err, known)
	}
	if p, ok, err := d.Resolve(ctx, "known"); err != nil || !ok || p != known {
		t.Errorf("Resolve(known) = %+v, %v, %v; want %+v from memory", p, ok, err, known)
	}
	if _, err := d.Place(ctx, "new"); !errors.Is(err, placement.ErrUnreachable) {
		t.Fatalf("Place(new) with etcd down: %v, want ErrUnreachable", err)
	}
	if _, ok, err := d.Resolve(ctx, "new"); ok || !errors.Is(err, placement.ErrUnreachable) {
		t.Errorf("Resolve(new) with etcd down: %v, %v; want ErrUnreachable, no guess", ok, err)
	}
	asked := d.Stats()
	_, err := d.Place(ctx, "newer")
	if now := d.Stats(); !errors.Is(err, placement.ErrUnreachable) || now.Places != asked.Places || now.Refused != asked.Refused+1 {
		t.Errorf("Place(newer) right after: %v, stats %+v then %+v; want ErrUnreachable, refused without a request", err, asked, now)
	}
	if err := d.Health(); !errors.Is(err, placement.ErrUnreachable) {
		t.Errorf("Health with etcd down: %v, want ErrUnreachable", err)
	}
}

// each applies f to every member of c.
func each(t *testing.T, c *etcdtest.Cluster, f func(*etcdtest.Member) error) {
	t.Helper()
	for i := range len(c.Endpoints()) {
		if err := f(c.Member(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// placeEventually places principal, trying again while etcd is
// unreachable, until ctx ends.
func placeEventually(ctx context.Context, t *testing.T, d *placement.Directory, principal string) placement.Placement {
	t.Helper()
	for {
		p, err := d.Place(ctx, principal)
		if err == nil {
			return p
		}
		if !errors.Is(err, placement.ErrUnreachable) || ctx.Err() != nil {
			t.Fatalf("Place(%s): %v", principal, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWatch_RevisionCompactedAway_Reloads: a replica whose member was
// down while the directory changed and etcd compacted its history cannot
// resume its watch; it reloads the directory and sees the change.
func TestWatch_RevisionCompactedAway_Reloads(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := openConfig(t, placement.Config{Endpoints: []string{c.Member(0).Endpoint()}, Pods: []string{"a", "b"}})
	if err := c.Member(0).Kill(); err != nil {
		t.Fatal(err)
	}
	// The two left may be electing a leader: their writes are retried.
	others := client(t, c.Member(1).Endpoint(), c.Member(2).Endpoint())
	putRetried(ctx, t, others, placement.DefaultPrefix+"placement/acme", `{"pod":"b"}`)
	rev := putRetried(ctx, t, others, "/elsewhere", "x")
	if _, err := others.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := c.Member(0).Start(); err != nil {
		t.Fatal(err)
	}
	if p := waitLookup(t, d, "acme"); p.Pod != "b" {
		t.Errorf("after the reload, acme is on %s, want b", p.Pod)
	}
	if s := d.Stats(); s.Reloads == 0 {
		t.Errorf("the replica saw acme without a reload: %+v", s)
	}
}

// putRetried writes key, again while the cluster has no leader, and
// returns the revision of the write.
func putRetried(ctx context.Context, t *testing.T, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cli.Put(pctx, key, value)
		cancel()
		if err == nil {
			return resp.Header.Revision
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
