package podmove_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/daemon/config"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pods"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/podmove"
	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/pgstore"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// world is two pods, a and b, on the package's cluster, a one-member
// etcd, a replica's router over them and a mover.
type world struct {
	urls   map[string]string
	etcd   *etcdtest.Cluster
	router *pods.Router
	g      *once.Guard
	mover  *podmove.Mover
}

func newWorld(t *testing.T) *world {
	t.Helper()
	c := pgtest.Require(t, cluster)
	w := &world{etcd: etcdtest.Start(t, 1), urls: map[string]string{}}
	var list []config.Pod
	for _, pod := range []string{"a", "b"} {
		w.urls[pod] = c.NewDatabase(t, pgtest.DatabaseName(t.Name()+"/"+pod))
		list = append(list, config.Pod{Name: pod, URL: w.urls[pod]})
	}
	dc := placement.Config{Endpoints: w.etcd.Endpoints(), Pods: []string{"a", "b"}}
	r, err := pods.Open(context.Background(), list, dc, func(ctx context.Context, p config.Pod) (intents.Backend, error) {
		return pgintents.Open(ctx, p.URL, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if w.g, err = once.New(r.Records(), once.Options{Lease: 30 * time.Second, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	w.router = r
	w.mover = w.newMover(t)
	return w
}

// newMover is a mover of its own: its directory and its pods' databases.
func (w *world) newMover(t *testing.T) *podmove.Mover {
	t.Helper()
	dir, err := placement.Open(context.Background(), placement.Config{Endpoints: w.etcd.Endpoints(), Pods: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	m := &podmove.Mover{Dir: dir, Pods: map[string]*pgstore.DB{}, By: "test", Log: slog.New(slog.DiscardHandler)}
	for pod, url := range w.urls {
		db, err := pgstore.Open(context.Background(), url, &pgstore.Options{NoMigrate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		m.Pods[pod] = db
	}
	return m
}

// create creates principal's intent under key as paymentsd does, and
// returns the answer's bytes.
func (w *world) create(principal, key string) ([]byte, error) {
	pi := &paymentsv1.PaymentIntent{Id: "pi_" + key, State: paymentsv1.State_STATE_CREATED, Version: 1,
		Amount: "100", CreateTime: timestamppb.New(time.Unix(1700000000, 0))}
	req := once.Request{Scope: principal, Key: key, Operation: "/test/Create", Message: pi, Transactional: true}
	resp, _, err := once.Do(context.Background(), w.g, req, func(ctx context.Context) (*paymentsv1.PaymentIntent, error) {
		return pi, w.router.Intents().CreateIntent(ctx, principal, key, pi)
	})
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(resp)
}

// onA is a principal a directory of pods a and b places on a.
func onA() string {
	for i := 0; ; i++ {
		p := fmt.Sprintf("merchant-%d", i)
		if pod, _ := placement.Choose(p, map[string]int{"a": 1, "b": 1}, nil); pod == "a" {
			return p
		}
	}
}

// seed creates n keys of principal and returns their answers.
func (w *world) seed(t *testing.T, principal string, n int) map[string][]byte {
	t.Helper()
	answers := map[string][]byte{}
	for i := range n {
		key := fmt.Sprintf("%s-k%d", principal, i)
		b, err := w.create(principal, key)
		if err != nil {
			t.Fatal(err)
		}
		answers[key] = b
	}
	return answers
}

// replaysAll checks that every key replays its first answer, retrying
// while the principal is refused for now (moving).
func (w *world) replaysAll(t *testing.T, principal string, answers map[string][]byte) {
	t.Helper()
	for key, want := range answers {
		var got []byte
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got, err = w.create(principal, key); err == nil || !once.Retryable(err) {
				break
			}
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("key %s after the move: %v, same bytes %t", key, err, bytes.Equal(got, want))
		}
	}
}

// rowsOf counts principal's records and intents on pod, and whether it is
// fenced there.
func (w *world) rowsOf(t *testing.T, pod, principal string) (records, intents int, fenced bool) {
	t.Helper()
	db := w.mover.Pods[pod]
	ctx := context.Background()
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM idempotency_records WHERE scope = $1),
		(SELECT count(*) FROM payment_intents WHERE owner = $1)`, principal).Scan(&records, &intents); err != nil {
		t.Fatal(err)
	}
	fenced, _, err := db.Fenced(ctx, principal)
	if err != nil {
		t.Fatal(err)
	}
	return records, intents, fenced
}

// TestMove_StoppedAfterEachStep_RerunFinishes: a mover stopped after each
// step, as one killed there; the principal is served by one pod
// throughout, and a second run finishes the move: every key replays its
// bytes from the target, the source keeps only its fence.
func TestMove_StoppedAfterEachStep_RerunFinishes(t *testing.T) {
	for _, step := range []string{podmove.StepFreeze, podmove.StepFence, podmove.StepCopy, podmove.StepFlip, podmove.StepCleanup} {
		t.Run(step, func(t *testing.T) {
			w := newWorld(t)
			p := onA()
			answers := w.seed(t, p, 5)
			w.mover.StopAfter = step
			if err := w.mover.Move(context.Background(), p, "b"); !errors.Is(err, podmove.ErrStopped) {
				t.Fatalf("Move stopped after %s: %v", step, err)
			}
			w.mover.StopAfter = ""
			for key, want := range answers { // stopped: the same answer, or retry later; never another
				if got, err := w.create(p, key); err != nil && !once.Retryable(err) || err == nil && !bytes.Equal(got, want) {
					t.Errorf("key %s with the move stopped after %s: %v, same bytes %t", key, step, err, bytes.Equal(got, want))
				}
			}
			if err := w.newMover(t).Move(context.Background(), p, "b"); err != nil {
				t.Fatalf("Move run again: %v", err)
			}
			w.replaysAll(t, p, answers)
			if pl, _ := w.router.Directory().Lookup(p); pl.Pod != "b" || pl.Move != nil || pl.Cleanup != "" {
				t.Errorf("placement after the move: %+v, want pod b, no move, nothing to clean", pl)
			}
			if r, i, fenced := w.rowsOf(t, "a", p); r != 0 || i != 0 || !fenced {
				t.Errorf("pod a holds %d records, %d intents of %s, fenced %t; want none, fenced", r, i, p, fenced)
			}
			if r, i, fenced := w.rowsOf(t, "b", p); r != 5 || i != 5 || fenced {
				t.Errorf("pod b holds %d records, %d intents of %s, fenced %t; want 5, 5, open", r, i, p, fenced)
			}
			if _, err := w.create(p, "after"); err != nil {
				t.Errorf("a new key after the move: %v", err)
			}
		})
	}
}

// TestMove_BeforeTheFlip_MovingBackUndoes: a move stopped after its copy
// is undone by moving the principal to where it is: it stays on pod a,
// served, and pod b keeps nothing of it.
func TestMove_BeforeTheFlip_MovingBackUndoes(t *testing.T) {
	w := newWorld(t)
	p := onA()
	answers := w.seed(t, p, 3)
	w.mover.StopAfter = podmove.StepCopy
	if err := w.mover.Move(context.Background(), p, "b"); !errors.Is(err, podmove.ErrStopped) {
		t.Fatal(err)
	}
	w.mover.StopAfter = ""
	if err := w.mover.Move(context.Background(), p, "a"); err != nil {
		t.Fatalf("moving back: %v", err)
	}
	w.replaysAll(t, p, answers)
	if r, i, fenced := w.rowsOf(t, "a", p); r != 3 || i != 3 || fenced {
		t.Errorf("pod a: %d records, %d intents, fenced %t; want 3, 3, open", r, i, fenced)
	}
	if r, i, _ := w.rowsOf(t, "b", p); r != 0 || i != 0 {
		t.Errorf("pod b: %d records, %d intents of %s; want none", r, i, p)
	}
}

// TestMove_SecondMover_Refused: while a mover holds a principal, another
// is refused, naming it.
func TestMove_SecondMover_Refused(t *testing.T) {
	w := newWorld(t)
	p := onA()
	w.seed(t, p, 1)
	unlock, err := w.mover.Dir.Lock(context.Background(), p, "first mover", 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := w.newMover(t).Move(context.Background(), p, "b"); !errors.Is(err, placement.ErrLocked) {
		t.Errorf("a second mover: %v, want ErrLocked", err)
	}
}
