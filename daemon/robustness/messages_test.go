package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
	"github.com/paymentsd/paymentsd/daemon/testkit/proctest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// The message run drives examples/jetstream, the NATS JetStream consumer
// that creates intents through once.Do. See doc.go.

// On bbolt one consumer process holds the file's lock: a second could not
// open it. It is killed, paused past AckWait, and outlives a broker restart.
func TestRobustness_Messages_Bolt(t *testing.T) {
	s := readSettings(t)
	msgSuite(t, s, "bbolt", func(dir string, seed uint64) msgStore {
		path := filepath.Join(dir, "payments.db")
		return msgStore{procs: 1, args: []string{"--db", path}, open: func() (intents.Backend, error) {
			return boltintents.Open(context.Background(), path)
		}}
	})
}

// On PostgreSQL two consumer processes share the durable consumer.
func TestRobustness_Messages_Postgres(t *testing.T) {
	s := readSettings(t)
	c, stop, err := pgtest.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL did not start and CI=true: %v", err)
		}
		t.Skipf("PostgreSQL not available: %v", err)
	}
	t.Cleanup(stop)
	msgSuite(t, s, "postgres", func(dir string, seed uint64) msgStore {
		url := c.NewDatabase(t, pgtest.DatabaseName(fmt.Sprintf("messages %d", seed)))
		return msgStore{procs: 2, args: []string{"--postgres", "env:ROBUSTNESS_PG_URL"}, env: []string{"ROBUSTNESS_PG_URL=" + url},
			open: func() (intents.Backend, error) { return pgintents.Open(context.Background(), url, nil) }}
	})
}

// The checks must see a consumer that creates without the exactly-once
// core (the example's --plain): one short run on bbolt.
func TestRobustness_Messages_PlainIsReported(t *testing.T) {
	s := readSettings(t)
	f, _ := msgRun(t, exampleBinary(t), s.seed, 4*time.Second, func(dir string, seed uint64) msgStore {
		path := filepath.Join(dir, "payments.db")
		return msgStore{procs: 1, args: []string{"--db", path, "--plain"}, open: func() (intents.Backend, error) {
			return boltintents.Open(context.Background(), path)
		}}
	})
	if len(f.violations) == 0 {
		t.Fatalf("seed %d: a consumer without the core made %d intents for %d messages, and the checks saw no violation", s.seed, f.intents, f.messages)
	}
	t.Logf("without the core: %d violations, the first: %s", len(f.violations), f.violations[0])
}

// msgStore is where a message run's consumers keep records and intents.
type msgStore struct {
	procs int      // consumer processes on the one durable consumer
	args  []string // the consumer's flags naming the store
	env   []string
	open  func() (intents.Backend, error)
}

// msgFigures are what a message run counted.
type msgFigures struct {
	messages, duplicates, reuses         int
	kills, pauses, restarts, redelivered int
	intents, replies, replayed           int
	violations                           []string
}

func (f *msgFigures) add(g msgFigures) {
	f.messages += g.messages
	f.duplicates += g.duplicates
	f.reuses += g.reuses
	f.kills += g.kills
	f.pauses += g.pauses
	f.restarts += g.restarts
	f.redelivered += g.redelivered
	f.intents += g.intents
	f.replies += g.replies
	f.replayed += g.replayed
}

// msgSuite runs s.runs message runs, fails on the first with a violation,
// and logs the summary line.
func msgSuite(t *testing.T, s settings, backend string, mk func(dir string, seed uint64) msgStore) {
	bin := exampleBinary(t)
	var all msgFigures
	for i := range s.runs {
		seed := s.seed + uint64(i)
		start := time.Now()
		f, logs := msgRun(t, bin, seed, s.duration, mk)
		if len(f.violations) > 0 {
			t.Fatalf("messages %s run %d: %d violations; replay with PAYMENTSD_ROBUSTNESS_SEED=%d PAYMENTSD_ROBUSTNESS_RUNS=1 (the schedule, not its timing); the first:\n%s\n%s",
				backend, i, len(f.violations), seed, strings.Join(f.violations[:min(len(f.violations), 10)], "\n"), logs)
		}
		t.Logf("messages %s run %d (seed %d): %d messages (%d duplicates, %d reuses), %d kills, %d pauses, %d broker restarts, %d redeliveries, %d replies (%d replayed), %d intents, 0 orphans, 0 violations (%v)",
			backend, i, seed, f.messages, f.duplicates, f.reuses, f.kills, f.pauses, f.restarts, f.redelivered, f.replies, f.replayed, f.intents, time.Since(start).Round(time.Millisecond))
		all.add(f)
	}
	// Redeliveries need a consumer stopped with commands in its hands:
	// the long suite must show some, or that path is no longer tested.
	if s.long && all.redelivered == 0 {
		t.Errorf("robustness messages %s: %d runs and no redelivery", backend, s.runs)
	}
	t.Logf("robustness messages %s: %d runs, %d messages, duplicates %d, reuses %d, kills %d, pauses %d, broker restarts %d, redeliveries %d, intents %d, orphans 0, violations 0",
		backend, s.runs, all.messages, all.duplicates, all.reuses, all.kills, all.pauses, all.restarts, all.redelivered, all.intents)
}

// msgKey is a key in its scope.
type msgKey struct {
	principal string
	index     int
}

func (k msgKey) name() string { return fmt.Sprintf("m-%05d", k.index) }

// amount is the amount of the key's body b: 0 the first, 1 the reuse.
func (k msgKey) amount(b int) string { return strconv.Itoa(k.index + 1 + b*1_000_000) }

// msgCommand is one command the broker stored.
type msgCommand struct {
	key  msgKey
	body int
	seq  uint64
}

// msgReply is one reply, as the reply stream kept it.
type msgReply struct {
	key      string
	code     string
	replayed bool
	body     []byte
}

// msgPublisher publishes the run's commands as alice and bob. A broker
// restart holds gate, so that no publish is in flight across it.
type msgPublisher struct {
	t    *testing.T
	pubs map[string]jetstream.JetStream
	gate sync.RWMutex

	mu     sync.Mutex
	sent   []msgCommand
	keys   []msgKey
	bodies map[msgKey]int // how many bodies of the key were sent
	dups   int
	reuses int
}

// publish publishes a command under id, trying again with the same id on
// an error: the broker drops the second if the first was stored, and its
// answer names the first's sequence.
func (p *msgPublisher) publish(k msgKey, b int, id string) (uint64, error) {
	p.gate.RLock()
	defer p.gate.RUnlock()
	m := nats.NewMsg("payments.create." + k.principal)
	m.Header.Set("Idempotency-Key", k.name())
	m.Data = msgBody(k.amount(b))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := p.pubs[k.principal].PublishMsg(ctx, m, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("publish %s of %s: %w", k.name(), k.principal, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// step publishes one random command: a new key (60%), a duplicate of an
// earlier command under a new Nats-Msg-Id, past the broker's dedup
// (~30%), or a reuse of a key with its other body.
func (p *msgPublisher) step(rng *rand.Rand, n int) error {
	p.mu.Lock()
	var k msgKey
	b := 0
	id := ""
	switch x := rng.Float64(); {
	case x < 0.6 || len(p.sent) == 0:
		k = msgKey{principal: []string{"alice", "bob"}[rng.IntN(2)], index: len(p.keys)}
		p.keys = append(p.keys, k)
		p.bodies[k] = 1
		id = k.name()
	case x < 0.9:
		c := p.sent[rng.IntN(len(p.sent))]
		k, b = c.key, c.body
		id = fmt.Sprintf("%s/%d/again-%d", k.name(), b, n)
		p.dups++
	default:
		k = p.keys[rng.IntN(len(p.keys))]
		if p.bodies[k] == 2 { // a key has two bodies at most: send the reuse again
			b = 1
			id = fmt.Sprintf("%s/1/again-%d", k.name(), n)
			p.dups++
			break
		}
		b = 1
		p.bodies[k] = 2
		id = k.name() + "/1"
		p.reuses++
	}
	p.mu.Unlock()
	seq, err := p.publish(k, b, id)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.sent = append(p.sent, msgCommand{key: k, body: b, seq: seq})
	p.mu.Unlock()
	return nil
}

// msgBody is a create request of the amount, in protojson.
func msgBody(amount string) []byte {
	b, err := protojson.Marshal(&paymentsv1.CreatePaymentIntentRequest{
		Chain: "evm:31337", Token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:   amount, ExpiresInSeconds: 900,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// msgReplies collects the reply stream, by command sequence.
type msgReplies struct {
	mu    sync.Mutex
	n     int
	bySeq map[uint64][]msgReply
}

func collectMsgReplies(t *testing.T, b *natstest.Broker, js jetstream.JetStream) *msgReplies {
	t.Helper()
	r := &msgReplies{bySeq: map[uint64][]msgReply{}}
	cons, err := js.OrderedConsumer(context.Background(), natstest.ReplyStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get("Command-Sequence"), 10, 64)
		g := msgReply{key: strings.TrimPrefix(m.Subject(), "payments.replies.") + "/" + h.Get("Idempotency-Key"),
			code: h.Get("Status-Code"), replayed: h.Get("Idempotent-Replayed") == "true", body: m.Data()}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n++
		r.bySeq[seq] = append(r.bySeq[seq], g)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Track(cc.Stop)
	return r
}

// unanswered counts the commands with no reply yet.
func (r *msgReplies) unanswered(sent []msgCommand) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range sent {
		if len(r.bySeq[c.seq]) == 0 {
			n++
		}
	}
	return n
}

// msgBurst is how many commands a burst publishes at once.
const msgBurst = 60

// msgFault is one fault of a run's schedule.
type msgFault struct {
	at   time.Duration
	kind string // "kill", "pause", "restart"
	proc int
}

// msgSchedule draws a run's faults: one or two kills, one pause past
// AckWait and one broker restart, in the first three quarters of the run.
func msgSchedule(rng *rand.Rand, procs int, d time.Duration) []msgFault {
	var fs []msgFault
	add := func(kind string) {
		at := d/10 + time.Duration(rng.Int64N(int64(d*65/100)))
		fs = append(fs, msgFault{at: at, kind: kind, proc: rng.IntN(procs)})
	}
	for range 1 + rng.IntN(2) {
		add("kill")
	}
	add("pause")
	add("restart")
	slices.SortFunc(fs, func(a, b msgFault) int { return int(a.at - b.at) })
	return fs
}

// msgRun is one run: a broker, the consumers on a fresh store, the
// publishers and the faults for d, then the wait for every command to be
// answered and acked, then the checks.
func msgRun(t *testing.T, bin string, seed uint64, d time.Duration, mk func(dir string, seed uint64) msgStore) (msgFigures, string) {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 7))
	st := mk(dir, seed)
	b := natstest.Start(t, dir)
	_, admin := b.Connect(natstest.Admin)
	cons := b.SetUp(admin, natstest.Creator)
	defer b.Close()
	got := collectMsgReplies(t, b, admin)
	_, alice := b.Connect("alice")
	_, bob := b.Connect("bob")
	pub := &msgPublisher{t: t, pubs: map[string]jetstream.JetStream{"alice": alice, "bob": bob}, bodies: map[msgKey]int{}}

	args := append([]string{"--nats", b.URL, "--user", natstest.Creator, "--stream", natstest.CommandStream, "--durable", natstest.Creator,
		"--retry-delay", "300ms"}, st.args...)
	env := append([]string{"NATS_PASSWORD=" + natstest.Password}, st.env...)
	var procs []*proctest.Proc
	for i := range st.procs {
		procs = append(procs, proctest.Start(t, bin, filepath.Join(dir, fmt.Sprintf("consumer-%d.log", i)), env, args...))
	}
	logs := func() string {
		var s []string
		for _, p := range procs {
			s = append(s, p.Log+":\n"+p.Tail(15))
		}
		return strings.Join(s, "\n")
	}

	// The publisher, until stop: a command every 5 to 15ms, and bursts of
	// msgBurst with no pause, which the faults ask for.
	var f msgFigures
	var burst atomic.Int64
	stop := make(chan struct{})
	pubErr := make(chan error, 1)
	go func() {
		prng := rand.New(rand.NewPCG(seed, 8))
		for n := 0; ; n++ {
			wait := time.Duration(5+prng.IntN(11)) * time.Millisecond
			if burst.Add(-1) >= 0 {
				wait = 0
			} else {
				burst.Store(0)
			}
			select {
			case <-stop:
				pubErr <- nil
				return
			case <-time.After(wait):
			}
			if err := pub.step(prng, n); err != nil {
				pubErr <- err
				return
			}
		}
	}()

	// The faults, in turn.
	start := time.Now()
	for _, fault := range msgSchedule(rng, st.procs, d) {
		time.Sleep(time.Until(start.Add(fault.at)))
		switch fault.kind {
		case "kill": // with commands in its hands
			burst.Store(msgBurst)
			time.Sleep(30 * time.Millisecond)
			procs[fault.proc].Kill()
			f.kills++
			// As a supervisor would, the next fault waits for the restart:
			// the example exits when its first connection finds no broker.
			for deadline := time.Now().Add(30 * time.Second); !procs[fault.proc].Started(`"msg":"consuming"`); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("seed %d: consumer %d not consuming 30s after its restart\n%s", seed, fault.proc, logs())
				}
			}
		case "pause": // and a burst, some of it delivered to the paused one
			procs[fault.proc].Pause(natstest.AckWait+time.Second, func() { burst.Store(msgBurst) })
			f.pauses++
		case "restart":
			pub.gate.Lock()
			b.Restart()
			pub.gate.Unlock()
			f.restarts++
		}
	}
	time.Sleep(time.Until(start.Add(d)))
	close(stop)
	if err := <-pubErr; err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, logs())
	}

	// Every command answered, and nothing pending or unacked, within 2 min.
	var info *jetstream.ConsumerInfo
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		info, err = cons.Info(ctx)
		cancel()
		unanswered := got.unanswered(pub.sent)
		if err == nil && unanswered == 0 && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			if err != nil {
				f.violations = append(f.violations, fmt.Sprintf("consumer info: %v", err))
			} else {
				f.violations = append(f.violations, fmt.Sprintf("after 2 minutes: %d commands unanswered, %d pending, %d unacked",
					unanswered, info.NumPending, info.NumAckPending))
			}
			return f, logs()
		}
	}
	for _, p := range procs {
		if err := p.Stop(); err != nil {
			f.violations = append(f.violations, err.Error())
		}
	}
	db, err := st.open()
	if err != nil {
		t.Fatalf("seed %d: open the store: %v", seed, err)
	}
	defer db.Close()
	f.messages, f.duplicates, f.reuses = len(pub.sent), pub.dups, pub.reuses
	f.redelivered = int(info.Delivered.Consumer) - len(pub.sent)
	checkMessages(&f, pub, got, db)
	return f, logs()
}

// checkMessages checks the replies and the store: per key, one body won
// and all its replies carry the same intent; every command of the other
// body was refused as a reuse; the create ran once; the store holds that
// intent, one per key, and no record in flight.
func checkMessages(f *msgFigures, pub *msgPublisher, got *msgReplies, db intents.Backend) {
	bad := func(format string, a ...any) { f.violations = append(f.violations, fmt.Sprintf(format, a...)) }
	got.mu.Lock()
	defer got.mu.Unlock()
	f.replies = got.n
	type result struct {
		won   map[int]bool
		first *paymentsv1.PaymentIntent
		fresh int
	}
	results := map[msgKey]*result{}
	for _, k := range pub.keys {
		results[k] = &result{won: map[int]bool{}}
	}
	for _, c := range pub.sent {
		r := results[c.key]
		for _, g := range got.bySeq[c.seq] {
			if want := c.key.principal + "/" + c.key.name(); g.key != want {
				bad("command %d of %s answered for %s", c.seq, want, g.key)
				continue
			}
			if g.replayed {
				f.replayed++
			}
			if g.code != "OK" {
				if !reusedRefusal(g) {
					bad("command %d of %s/%s (body %d): %s %s", c.seq, c.key.principal, c.key.name(), c.body, g.code, g.body)
				}
				continue
			}
			resp := &paymentsv1.CreatePaymentIntentResponse{}
			if err := protojson.Unmarshal(g.body, resp); err != nil {
				bad("command %d: reply %s: %v", c.seq, g.body, err)
				continue
			}
			r.won[c.body] = true
			if !g.replayed {
				r.fresh++
			}
			if r.first == nil {
				r.first = resp.PaymentIntent
			} else if !proto.Equal(r.first, resp.PaymentIntent) {
				bad("%s/%s answered %s of %s, then %s of %s", c.key.principal, c.key.name(),
					r.first.Id, r.first.Amount, resp.PaymentIntent.Id, resp.PaymentIntent.Amount)
			}
		}
	}
	known := 0
	for _, c := range pub.sent {
		known += len(got.bySeq[c.seq])
	}
	if known != got.n {
		bad("%d replies name a command that was never published", got.n-known)
	}
	want := map[string]string{} // intent id to its amount
	for k, r := range results {
		switch {
		case len(r.won) != 1:
			bad("%s/%s: %d bodies answered OK; want exactly one", k.principal, k.name(), len(r.won))
		case r.fresh > 1:
			bad("%s/%s: %d replies not marked replayed: the create ran more than once", k.principal, k.name(), r.fresh)
		}
		if r.first != nil {
			if r.first.Amount != k.amount(0) && r.first.Amount != k.amount(1) {
				bad("%s/%s: answered an intent of amount %s", k.principal, k.name(), r.first.Amount)
			}
			want[r.first.Id] = r.first.Amount
		}
	}
	// A refused body is the one that did not win.
	for _, c := range pub.sent {
		for _, g := range got.bySeq[c.seq] {
			if g.code != "OK" && reusedRefusal(g) && results[c.key].won[c.body] {
				bad("%s/%s: body %d both answered and refused as a reuse", c.key.principal, c.key.name(), c.body)
			}
		}
	}
	ctx := context.Background()
	for _, owner := range []string{"alice", "bob"} {
		var after []byte
		for {
			page, next, err := db.Intents().ListIntents(ctx, owner, after, 500)
			if err != nil {
				bad("list %s: %v", owner, err)
				break
			}
			for _, pi := range page {
				f.intents++
				if amount, ok := want[pi.Id]; !ok {
					bad("orphan intent %s of %s for %s: no reply names it", pi.Id, owner, pi.Amount)
				} else if amount != pi.Amount {
					bad("intent %s of %s stores %s; replied %s", pi.Id, owner, pi.Amount, amount)
				}
			}
			if after = next; next == nil {
				break
			}
		}
	}
	if f.intents != len(pub.keys) || len(want) != len(pub.keys) {
		bad("%d intents stored, %d answered, for %d keys", f.intents, len(want), len(pub.keys))
	}
	inFlight, err := db.Records().InFlight(ctx, storage.RecordKey{}, 10)
	if err != nil || len(inFlight) != 0 {
		bad("records in flight at the end: %d (%v)", len(inFlight), err)
	}
}

// reusedRefusal reports whether g refuses its command as a key reused
// with another body.
func reusedRefusal(g msgReply) bool {
	st := &spb.Status{}
	if g.code != "FAILED_PRECONDITION" || protojson.Unmarshal(g.body, st) != nil {
		return false
	}
	for _, d := range st.Details {
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) == nil && info.Reason == wire.ReasonKeyReused {
			return true
		}
	}
	return false
}
