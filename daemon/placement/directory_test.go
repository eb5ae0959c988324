package placement_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestPlace_ConcurrentThreeDirectories_OnePlacement: three replicas, 20
// callers each, place one new principal at once. There is one placement,
// every caller gets it, it was written once, and each replica asked etcd
// at most once.
func TestPlace_ConcurrentThreeDirectories_OnePlacement(t *testing.T) {
	c := etcdtest.Start(t, 3)
	dirs := []*placement.Directory{open(t, c, "a", "b"), open(t, c, "a", "b"), open(t, c, "a", "b")}
	for i := range 3 {
		principal := fmt.Sprintf("merchant/%d:new", i)
		got := placeAtOnce(t, dirs, principal, 20)
		first := got[0]
		for _, p := range got {
			if p != first {
				t.Fatalf("%s: callers got %+v and %+v", principal, first, p)
			}
		}
		kv := stored(t, c, placement.DefaultPrefix, principal)
		if kv.Version != 1 || kv.CreateRevision != first.Revision {
			t.Errorf("%s in etcd: version %d, created at %d; want version 1 created at %d",
				principal, kv.Version, kv.CreateRevision, first.Revision)
		}
	}
	for i, d := range dirs {
		if s := d.Stats(); s.Places > 3 {
			t.Errorf("replica %d sent %d compare-and-sets for 3 principals, want at most 3: %+v", i, s.Places, s)
		}
	}
}

// placeAtOnce has n callers on each directory place principal at the same
// moment, and returns what each got. Any error fails the test.
func placeAtOnce(t *testing.T, dirs []*placement.Directory, principal string, n int) []placement.Placement {
	t.Helper()
	var (
		start = make(chan struct{})
		mu    sync.Mutex
		got   []placement.Placement
		wg    sync.WaitGroup
	)
	for _, d := range dirs {
		for range n {
			wg.Go(func() {
				<-start
				p, err := d.Place(context.Background(), principal)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Place(%q): %v", principal, err)
				}
				got = append(got, p)
			})
		}
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return got
}

// TestWatch_OtherDirectorySeesAPlacementMadeElsewhere: a replica learns a
// placement another made from its watch, without asking etcd.
func TestWatch_OtherDirectorySeesAPlacementMadeElsewhere(t *testing.T) {
	c := etcdtest.Start(t, 3)
	one, two := open(t, c, "a", "b"), open(t, c, "a", "b")
	placed, err := one.Place(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := waitLookup(t, two, "acme"); got != placed {
		t.Errorf("the other replica sees %+v, want %+v", got, placed)
	}
	if p, err := two.Place(context.Background(), "acme"); err != nil || p != placed {
		t.Errorf("the other replica's Place = %+v, %v; want %+v", p, err, placed)
	}
	if s := two.Stats(); s.Places != 0 {
		t.Errorf("the other replica asked etcd %d times, want 0: it knew from its watch", s.Places)
	}
}

// TestResolve_ReadsWithoutPlacing: a read of a principal never placed asks
// etcd once and places nothing; one placed by another replica is found.
func TestResolve_ReadsWithoutPlacing(t *testing.T) {
	c := etcdtest.Start(t, 3)
	one, two := open(t, c, "a", "b"), open(t, c, "a", "b")
	ctx := context.Background()
	if p, ok, err := one.Resolve(ctx, "nobody"); err != nil || ok {
		t.Fatalf("Resolve(nobody) = %+v, %v, %v; want not placed", p, ok, err)
	}
	if s := one.Stats(); s.Resolves != 1 || s.Places != 0 {
		t.Errorf("stats %+v, want 1 read and no placement", s)
	}
	if _, ok := one.Lookup("nobody"); ok {
		t.Error("Resolve placed a principal")
	}
	placed, err := two.Place(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := one.Resolve(ctx, "acme"); err != nil || !ok || p != placed {
		t.Errorf("Resolve(acme) = %+v, %v, %v; want %+v", p, ok, err, placed)
	}
}

// TestPlace_OnAPodNotServed_ErrUnknownPod: a principal placed on a pod
// this replica does not list is known, and refused by Place. The key is
// the principal path-escaped, / and : included.
func TestPlace_OnAPodNotServed_ErrUnknownPod(t *testing.T) {
	c := etcdtest.Start(t, 3)
	put(t, c, placement.DefaultPrefix+"placement/"+url.PathEscape("team/x:1"), `{"pod":"c"}`)
	d := open(t, c, "a", "b")
	if got, ok := d.Lookup("team/x:1"); !ok || got.Pod != "c" {
		t.Fatalf("Lookup = %+v, %v; want pod c", got, ok)
	}
	p, err := d.Place(context.Background(), "team/x:1")
	if !errors.Is(err, placement.ErrUnknownPod) || p.Pod != "c" {
		t.Errorf("Place = %+v, %v; want pod c and ErrUnknownPod", p, err)
	}
}

// TestPlace_PodOfWeightZero_TakesNoOne: a pod the directory weighs 0
// takes no new principal; with no other pod, Place refuses.
func TestPlace_PodOfWeightZero_TakesNoOne(t *testing.T) {
	c := etcdtest.Start(t, 3)
	put(t, c, "/other/pods/a", `{"weight":0}`)
	d := openPrefix(t, c, "/other/", "a", "b")
	for i := range 20 {
		p, err := d.Place(context.Background(), fmt.Sprintf("p%d", i))
		if err != nil || p.Pod != "b" {
			t.Fatalf("Place(p%d) = %+v, %v; want pod b", i, p, err)
		}
	}
	if _, err := openPrefix(t, c, "/other/", "a").Place(context.Background(), "new"); !errors.Is(err, placement.ErrNoPod) {
		t.Errorf("Place with only a pod of weight 0: %v, want ErrNoPod", err)
	}
	if _, ok := open(t, c, "a", "b").Lookup("p0"); ok {
		t.Errorf("a directory under %s sees a placement made under /other/", placement.DefaultPrefix)
	}
}

// TestOpen_RefusesWhatCannotWork: a configuration that cannot work is
// refused before any connection.
func TestOpen_RefusesWhatCannotWork(t *testing.T) {
	ep := []string{"http://127.0.0.1:1"}
	for name, c := range map[string]placement.Config{
		"no endpoints":       {Pods: []string{"a"}},
		"no pods":            {Endpoints: ep},
		"prefix without /":   {Endpoints: ep, Pods: []string{"a"}, Prefix: "/paymentsd"},
		"a pod named twice":  {Endpoints: ep, Pods: []string{"a", "a"}},
		"a pod with no name": {Endpoints: ep, Pods: []string{""}},
		"a pod with a slash": {Endpoints: ep, Pods: []string{"a/b"}},
	} {
		if d, err := placement.Open(context.Background(), c); err == nil {
			d.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
}

func open(t *testing.T, c *etcdtest.Cluster, pods ...string) *placement.Directory {
	t.Helper()
	return openPrefix(t, c, "", pods...)
}

func openPrefix(t *testing.T, c *etcdtest.Cluster, prefix string, pods ...string) *placement.Directory {
	t.Helper()
	return openConfig(t, placement.Config{Endpoints: c.Endpoints(), Prefix: prefix, Pods: pods})
}

func openConfig(t *testing.T, cfg placement.Config) *placement.Directory {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := placement.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// waitLookup polls d until it knows principal, for up to a minute.
func waitLookup(t *testing.T, d *placement.Directory, principal string) placement.Placement {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if p, ok := d.Lookup(principal); ok {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the directory does not know %s after a minute", principal)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// raw is a plain etcd client of c, as another program would be.
func raw(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	return client(t, c.Endpoints()...)
}

func client(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func put(t *testing.T, c *etcdtest.Cluster, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := raw(t, c).Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// stored reads principal's placement key as etcd holds it.
func stored(t *testing.T, c *etcdtest.Cluster, prefix, principal string) *mvccpb.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := raw(t, c).Get(ctx, prefix+"placement/"+url.PathEscape(principal))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s's placement: %v, %d keys", principal, err, len(resp.Kvs))
	}
	return resp.Kvs[0]
}
