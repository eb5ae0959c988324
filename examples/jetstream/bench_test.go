package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
	"github.com/paymentsd/paymentsd/daemon/testkit/proctest"
)

// TestThroughput measures the example's commands per second, with the core
// and with --plain, in turns on one broker and one stream. It runs only
// when PAYMENTSD_JETSTREAM_BENCH gives the commands per run:
//
//	PAYMENTSD_JETSTREAM_BENCH=5000 go test -count=1 -run '^TestThroughput$' -v ./examples/jetstream
//
// PAYMENTSD_JETSTREAM_BENCH_ROUNDS sets the rounds (3). Run it without -race.
func TestThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PAYMENTSD_JETSTREAM_BENCH"))
	if n < 2 {
		t.Skip("set PAYMENTSD_JETSTREAM_BENCH to the commands per run")
	}
	rounds, _ := strconv.Atoi(os.Getenv("PAYMENTSD_JETSTREAM_BENCH_ROUNDS"))
	rounds = cmp.Or(rounds, 3)
	b := natstest.Start(t, t.TempDir())
	adminNC, admin := b.Connect(natstest.Admin)
	b.SetUp(admin, "unused")
	publishBench(t, admin, n)

	var replies atomic.Int64
	var first, last atomic.Int64 // unix nanoseconds
	sub, err := adminNC.Subscribe(replyPrefix+">", func(*nats.Msg) {
		now := time.Now().UnixNano()
		if replies.Add(1) == 1 {
			first.Store(now)
		}
		last.Store(now)
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	rates := map[bool][]float64{}
	dir := t.TempDir()
	for r := range rounds {
		for _, plain := range []bool{r%2 == 1, r%2 == 0} { // each goes first in turn
			name := fmt.Sprintf("bench-%d-%t", r, plain)
			b.SetUp(admin, name)
			replies.Store(0)
			args := []string{"--nats", b.URL, "--user", natstest.Creator, "--durable", name, "--db", dir + "/" + name + ".db"}
			if plain {
				args = append(args, "--plain")
			}
			p := startConsumer(t, dir, name, []string{"NATS_PASSWORD=" + natstest.Password}, args...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			waitFor(t, ctx, "the run's replies", func() bool { return replies.Load() >= int64(n) }, []*proctest.Proc{p})
			cancel()
			stopConsumer(t, p)
			rate := float64(n-1) / time.Duration(last.Load()-first.Load()).Seconds()
			rates[plain] = append(rates[plain], rate)
			t.Logf("round %d, plain %t: %.0f commands/s", r+1, plain, rate)
		}
	}
	core, plain := median(rates[false]), median(rates[true])
	t.Logf("%d commands a run, %d rounds, bbolt: core %.0f/s, plain %.0f/s (medians); core/plain %.2f", n, rounds, core, plain, core/plain)
}

// publishBench publishes n commands with distinct keys, for every run.
func publishBench(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	for i := range n {
		k := keyOf(i)
		m := nats.NewMsg(createPrefix + k.principal)
		m.Header.Set(keyHeader, k.key)
		m.Data = body(i + 1)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing did not complete")
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
