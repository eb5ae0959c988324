package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestCluster_LeaderKilled_WritesContinue_RestartedMemberRejoins: three
// members take a write; with the leader killed the other two elect one
// and take writes; the killed member, started on its data, rejoins and
// serves what was written while it was down.
func TestCluster_LeaderKilled_WritesContinue_RestartedMemberRejoins(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := client(t, c.Endpoints()...)
	put(ctx, t, cli, "before", "1")

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Member(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("member %d still leads after it was killed", leader)
	}
	put(ctx, t, cli, "during", "2")

	if err := c.Member(leader).Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(20))
	}
	// Only the restarted member: a linearizable read there needs it to
	// have rejoined and caught up.
	back := client(t, c.Member(leader).Endpoint())
	resp, err := back.Get(ctx, "during")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("restarted member %d reads %v for the key written while it was down, want 2", leader, resp.Kvs)
	}
}

// TestCluster_PausedMember_ResumedServes: a paused member answers nothing
// while the others take writes; resumed, it serves them.
func TestCluster_PausedMember_ResumedServes(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Member(2).Pause(); err != nil {
		t.Fatal(err)
	}
	put(ctx, t, client(t, c.Member(0).Endpoint(), c.Member(1).Endpoint()), "k", "v")
	if err := c.Member(2).Resume(); err != nil {
		t.Fatal(err)
	}
	resp, err := client(t, c.Member(2).Endpoint()).Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("resumed member reads %v, want v", resp.Kvs)
	}
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

// put writes key, retrying while an election leaves no leader.
func put(ctx context.Context, t *testing.T, cli *clientv3.Client, key, value string) {
	t.Helper()
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Put(pctx, key, value)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		t.Logf("put %s: %v; again", key, err)
		time.Sleep(100 * time.Millisecond)
	}
}
