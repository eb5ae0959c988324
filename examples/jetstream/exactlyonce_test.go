package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
	"github.com/paymentsd/paymentsd/daemon/testkit/proctest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// The acceptance figures: 1,000 commands, 30% of them published again,
// 20 keys reused with another body, three kills with SIGKILL.
const (
	originals  = 1000
	duplicates = 300
	reuses     = 20
	kills      = 3
)

// scenario is one run of the acceptance test on one store.
type scenario struct {
	procs int      // consumer processes on the one durable consumer
	store []string // the consumer's flags naming its store
	env   []string // and its environment
	open  func(t *testing.T) intents.Backend
	// outage, when set, takes the store down for a while mid-stream.
	outage func(t *testing.T)
}

// On bbolt, one consumer killed three times mid-stream and restarted
// creates one intent per key and answers every duplicate alike.
func TestExactlyOnce_Bolt(t *testing.T) {
	path := t.TempDir() + "/payments.db"
	runScenario(t, scenario{procs: 1, store: []string{"--db", path}, open: func(t *testing.T) intents.Backend {
		db, err := boltintents.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}})
}

// On PostgreSQL, two consumers share the durable consumer, each killed in
// turn, and the same holds. The database also crashes once mid-stream.
func TestExactlyOnce_Postgres(t *testing.T) {
	c := pgtest.Require(t, cluster)
	url := c.NewDatabase(t, pgtest.DatabaseName(t.Name()))
	runScenario(t, scenario{procs: 2, store: []string{"--postgres", "env:TEST_PG_URL"}, env: []string{"TEST_PG_URL=" + url},
		open: func(t *testing.T) intents.Backend {
			db, err := pgintents.Open(context.Background(), url, nil)
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
		outage: func(t *testing.T) {
			c.Stop(t)
			time.Sleep(time.Second)
			c.StartAgain(t)
		}})
}

func runScenario(t *testing.T, sc scenario) {
	start := time.Now()
	b := natstest.Start(t, t.TempDir())
	_, admin := b.Connect(natstest.Admin)
	cons := b.SetUp(admin, "creator")
	_, alice := b.Connect("alice")
	_, bob := b.Connect("bob")
	got := collectReplies(t, admin)

	args := append([]string{"--nats", b.URL, "--user", natstest.Creator, "--stream", natstest.CommandStream, "--durable", "creator"}, sc.store...)
	env := append([]string{"NATS_PASSWORD=" + natstest.Password}, sc.env...)
	dir := t.TempDir()
	var procs []*proctest.Proc
	for i := range sc.procs {
		procs = append(procs, startConsumer(t, dir, "consumer-"+string(rune('a'+i)), env, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w := &workload{originals: originals, duplicates: duplicates, reuses: reuses,
		pubs: map[string]jetstream.JetStream{"alice": alice, "bob": bob}}
	published := w.run(t, ctx, uint64(time.Now().UnixNano()), got.answered)

	// Kill mid-stream: at a quarter, half and three quarters of the replies.
	for k := range kills {
		waitFor(t, ctx, "replies for the kill", func() bool { return got.count() >= (k+1)*(originals+duplicates)/(kills+1) }, procs)
		procs[k%len(procs)].Kill()
		if k == 1 && sc.outage != nil {
			// A consumer that cannot open its store exits: first let it open.
			restarted := procs[k%len(procs)]
			waitFor(t, ctx, "the consumer's restart", func() bool { return restarted.Started(`"msg":"consuming"`) }, procs)
			sc.outage(t)
		}
	}
	select {
	case err := <-published:
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("publishing did not end")
	}
	var info *jetstream.ConsumerInfo
	waitFor(t, ctx, "every command answered and acked", func() bool {
		sent := w.commands()
		var err error
		info, err = cons.Info(ctx)
		return err == nil && len(sent) == w.total() && got.unanswered(sent) == 0 &&
			info.NumPending == 0 && info.NumAckPending == 0
	}, procs)
	for _, p := range procs {
		stopConsumer(t, p)
	}
	db := sc.open(t)
	defer db.Close()
	f := verify(t, w, got, db)

	asked := 0
	for _, p := range procs {
		asked += strings.Count(p.Logs(), "redelivery asked")
		if strings.Contains(p.Logs(), pgtest.Password) {
			t.Errorf("a consumer logged the database password")
		}
	}
	t.Logf("%d consumer(s), %d commands (%d originals, %d duplicates, %d reuses, %d malformed; %d more dropped by the broker's dedup), %d kills: "+
		"%d intents, %d replies (%d replayed), %d deliveries (%d nak'ed), in %v",
		sc.procs, w.total(), originals, duplicates, reuses, malformedCommands, w.brokerDedups, kills,
		f.intents, got.count(), f.replayed, info.Delivered.Consumer, asked, time.Since(start).Round(time.Millisecond))
	if sc.outage != nil && asked == 0 {
		t.Error("the store's outage had no command nak'ed")
	}
	if w.brokerDedups != w.probes {
		t.Errorf("the broker dropped %d of %d commands republished in its window with the same id", w.brokerDedups, w.probes)
	}
}

// waitFor waits until cond holds, failing with the consumers' logs when ctx
// ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool, procs []*proctest.Proc) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			for _, p := range procs {
				t.Logf("last lines of %s:\n%s", p.Log, p.Tail(30))
			}
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
