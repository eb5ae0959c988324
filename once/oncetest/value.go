package oncetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// The tests of this file run once.DoValue, the form for plain Go values.

// charge is a request of plain Go values, as a caller's own function
// takes it.
type charge struct {
	Order  string            `json:"order"`
	Amount int64             `json:"amount"`
	Labels map[string]string `json:"labels,omitempty"`
}

// receipt is a response of plain Go values.
type receipt struct {
	ChargeID string    `json:"charge_id"`
	At       time.Time `json:"at"`
	Attempt  uint64    `json:"attempt"`
	internal string    // not in JSON: no call sees it
}

func valueRequest(key string) once.Request {
	return once.Request{Scope: "scope-a", Key: key, Operation: "charge"}
}

// charger returns a function that counts its runs and charges.
func charger(runs *atomic.Int32) func(context.Context, charge) (receipt, error) {
	return func(ctx context.Context, c charge) (receipt, error) {
		runs.Add(1)
		attempt, _ := once.AttemptFrom(ctx)
		return receipt{ChargeID: "ch_" + c.Order, At: t0, Attempt: attempt, internal: "set"}, nil
	}
}

// testValueReplays: a plain Go function runs once; the first call and
// every replay, on a reopened store too, get the same decoded value, and
// only replays say so. Map order does not change the fingerprint.
func testValueReplays(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	now := clockAt(t0)
	var runs atomic.Int32
	in := charge{Order: "o-1", Amount: 100, Labels: map[string]string{"a": "1", "b": "2", "c": "3"}}
	want := receipt{ChargeID: "ch_o-1", At: t0, Attempt: 1}
	for i := range 3 {
		if i == 2 {
			s = reopen(t, open, dir, s)
		}
		in.Labels = map[string]string{"c": "3", "b": "2", "a": "1"} // built anew: another map order
		got, answered, err := once.DoValue(context.Background(), guard(t, s, now, once.Options{}), valueRequest("k"), in, charger(&runs))
		if err != nil || got != want || answered != (once.Answered{Replayed: i > 0, Attempt: 1}) {
			t.Fatalf("DoValue #%d = %+v, %+v, %v; want %+v, replayed %t, attempt 1", i+1, got, answered, err, want, i > 0)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the function ran %d times, want 1", runs.Load())
	}
	rec, err := s.Get(context.Background(), storage.RecordKey{Scope: "scope-a", Key: "k"})
	if err != nil || rec == nil || rec.Scheme != "sha256-json-v1" {
		t.Fatalf("stored record %+v, %v; want one of scheme sha256-json-v1", rec, err)
	}
}

// testValueRefusalsAndStoredErrors: the function's own errors are stored
// and told apart from the rules' refusals by type and by errors.Is, never
// by a string; another value, or a protobuf request, under the key is a
// reuse.
func testValueRefusalsAndStoredErrors(t *testing.T, open Opener) {
	s := newStore(t, open)
	g := guard(t, s, clockAt(t0), once.Options{})
	var runs atomic.Int32
	declined := func(context.Context, charge) (receipt, error) {
		runs.Add(1)
		return receipt{}, once.Errorf(code.Code_FAILED_PRECONDITION, "card declined")
	}
	for i := range 2 {
		_, answered, err := once.DoValue(context.Background(), g, valueRequest("k"), charge{Order: "o-1", Amount: 5}, declined)
		var stored *once.StoredError
		if !errors.As(err, &stored) || stored.Code() != code.Code_FAILED_PRECONDITION || answered.Replayed != (i > 0) {
			t.Fatalf("DoValue #%d: %v, %+v; want the stored FAILED_PRECONDITION, replayed %t", i+1, err, answered, i > 0)
		}
		if errors.As(err, new(*once.Refusal)) {
			t.Fatalf("DoValue #%d: the function's error %v is a refusal", i+1, err)
		}
	}
	_, _, err := once.DoValue(context.Background(), g, valueRequest("k"), charge{Order: "o-1", Amount: 6}, declined)
	refusedAs(t, err, once.ErrKeyReused, code.Code_FAILED_PRECONDITION, wire.ReasonKeyReused)
	_, _, err = once.Do(context.Background(), g, onceRequest("k", "o-1"), counted(new(atomic.Int32), "paid", nil))
	refusedAs(t, err, once.ErrKeyReused, code.Code_FAILED_PRECONDITION, wire.ReasonKeyReused)
	_, _, err = once.DoValue(context.Background(), g, valueRequest(""), charge{}, declined)
	refusedAs(t, err, once.ErrInvalidKey, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid)
	withMessage := onceRequest("k2", "o-1")
	if _, _, err := once.DoValue(context.Background(), g, withMessage, charge{}, declined); !errors.Is(err, once.ErrMisuse) {
		t.Fatalf("DoValue with a message: %v, want ErrMisuse", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := once.DoValue(ctx, g, valueRequest("k3"), charge{}, declined); !errors.Is(err, context.Canceled) || !errors.As(err, new(*once.Refusal)) {
		t.Fatalf("DoValue with a canceled context: %v, want a refusal that is context.Canceled", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the function ran %d times, want 1", runs.Load())
	}
}

// grpcStatuses keeps gRPC status errors, as interceptor.StatusErrors does.
// The suite has its own, since the interceptor imports once.
type grpcStatuses struct{}

func (grpcStatuses) Status(err error) (*spb.Status, bool) {
	s, ok := status.FromError(err)
	return s.Proto(), ok
}

func (grpcStatuses) Error(st *spb.Status) error { return status.ErrorProto(st) }

// testValueStatusErrors: with a Statuses for gRPC, a gRPC status error
// keeps its code and details, on the first run and on replays.
func testValueStatusErrors(t *testing.T, open Opener) {
	s := newStore(t, open)
	g := guard(t, s, clockAt(t0), once.Options{Statuses: grpcStatuses{}})
	invalid, err := status.New(codes.InvalidArgument, "amount must be > 0").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be > 0"}}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	for i := range 2 {
		_, answered, err := once.DoValue(context.Background(), g, valueRequest("k"), charge{Order: "o-1"},
			func(context.Context, charge) (receipt, error) {
				runs.Add(1)
				return receipt{}, invalid.Err()
			})
		got, ok := status.FromError(err)
		if !ok || !proto.Equal(got.Proto(), invalid.Proto()) || answered.Replayed != (i > 0) {
			t.Fatalf("DoValue #%d: %v (a status: %t), %+v; want %v with its BadRequest, replayed %t", i+1, err, ok, answered, invalid.Proto(), i > 0)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the function ran %d times, want 1", runs.Load())
	}
}

// testValueConcurrent: 50 concurrent calls of one key run the function
// once. Without InFlightWait the others are refused in flight, or replay
// once it is done; with it, they all get its answer.
func testValueConcurrent(t *testing.T, open Opener) {
	s := newStore(t, open)
	for _, wait := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("InFlightWait=%v", wait), func(t *testing.T) {
			g := guard(t, s, clockAt(t0), once.Options{InFlightWait: wait})
			key := fmt.Sprintf("k-%v", wait)
			var runs atomic.Int32
			slow := func(ctx context.Context, c charge) (receipt, error) {
				time.Sleep(20 * time.Millisecond) // long enough for the others to meet it
				return charger(&runs)(ctx, c)
			}
			var firsts, replays, inFlight atomic.Int32
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					got, answered, err := once.DoValue(context.Background(), g, valueRequest(key), charge{Order: "o-1"}, slow)
					switch {
					case errors.Is(err, once.ErrInFlight) && wait == 0:
						inFlight.Add(1)
					case err != nil || got.ChargeID != "ch_o-1":
						t.Errorf("DoValue = %+v, %v", got, err)
					case answered.Replayed:
						replays.Add(1)
					default:
						firsts.Add(1)
					}
				})
			}
			wg.Wait()
			if runs.Load() != 1 || firsts.Load() != 1 || wait > 0 && replays.Load() != 49 {
				t.Fatalf("%d runs, %d first answers, %d replays, %d in flight; want 1 run, 1 first answer, the rest replays or (without a wait) in flight",
					runs.Load(), firsts.Load(), replays.Load(), inFlight.Load())
			}
		})
	}
}

// testValueTransactional: on a TxStore, a transactional DoValue commits
// its claim with its answer; an error of a NotStored code leaves the key
// free, and the next call runs again.
func testValueTransactional(t *testing.T, open Opener) {
	s := newStore(t, open)
	as[storage.TxStore](t, s)
	g := guard(t, s, clockAt(t0), once.Options{NotStored: []code.Code{code.Code_UNAVAILABLE}})
	req := valueRequest("k")
	req.Transactional = true
	var runs atomic.Int32
	busy := func(context.Context, charge) (receipt, error) {
		runs.Add(1)
		return receipt{}, once.Errorf(code.Code_UNAVAILABLE, "the bank is busy")
	}
	for range 2 {
		if _, _, err := once.DoValue(context.Background(), g, req, charge{Order: "o-1"}, busy); !errors.As(err, new(*once.StoredError)) {
			t.Fatalf("DoValue of a busy bank: %v, want its UNAVAILABLE", err)
		}
	}
	got, answered, err := once.DoValue(context.Background(), g, req, charge{Order: "o-1"}, charger(&runs))
	if err != nil || got.ChargeID != "ch_o-1" || answered.Replayed || runs.Load() != 3 {
		t.Fatalf("DoValue after two unstored errors = %+v, %+v, %v after %d runs; want a first answer after 3 runs", got, answered, err, runs.Load())
	}
	rec, err := s.Get(context.Background(), storage.RecordKey{Scope: "scope-a", Key: "k"})
	if err != nil || rec == nil || rec.Durability != storage.Transactional || rec.State != storage.StateCompleted {
		t.Fatalf("record after a transactional DoValue: %+v, %v; want completed, Transactional", rec, err)
	}
}

// childEnv names the store directory to a copy of the test binary that
// claims a key and then waits to be killed.
const childEnv = "PAYMENTSD_ONCETEST_CHILD_DIR"

// testValueTakeoverAfterKill: a process that ran the function is killed
// with SIGKILL before its answer was stored. Once the lease has ended, the
// next call takes the key over as attempt 2, runs the function once, and
// every later call replays that answer.
func testValueTakeoverAfterKill(t *testing.T, open Opener) {
	if dir := os.Getenv(childEnv); dir != "" {
		runKilledChild(t, open, dir)
		return
	}
	dir := t.TempDir()
	parts := strings.SplitN(t.Name(), "/", 2)
	cmd := exec.Command(os.Args[0], "-test.run=^"+parts[0]+"$/^"+parts[1]+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "oncetest: running" {
				running <- true
				break
			}
		}
		close(running)
	}()
	select {
	case ok := <-running:
		if !ok {
			t.Fatalf("the child ended before its function ran: %v", cmd.Wait())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("the child's function did not run within a minute")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()

	s := openStore(t, open, dir)
	var runs atomic.Int32
	for i := range 2 {
		got, answered, err := once.DoValue(context.Background(), guard(t, s, clockAt(t0.Add(2*lease)), once.Options{}),
			valueRequest("k"), charge{Order: "o-1"}, charger(&runs))
		if err != nil || got.Attempt != 2 || answered != (once.Answered{Replayed: i > 0, Attempt: 2}) {
			t.Fatalf("DoValue #%d after the kill = %+v, %+v, %v; want attempt 2's receipt, replayed %t", i+1, got, answered, err, i > 0)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the function ran %d times after the kill, want 1", runs.Load())
	}
}

// runKilledChild is the killed process: it claims the key at t0 and says
// so from inside its function, which never returns.
func runKilledChild(t *testing.T, open Opener, dir string) {
	s := open(t, dir)
	g := guard(t, s, clockAt(t0), once.Options{})
	once.DoValue(context.Background(), g, valueRequest("k"), charge{Order: "o-1"}, func(context.Context, charge) (receipt, error) {
		fmt.Println("oncetest: running")
		time.Sleep(time.Hour) // until killed
		return receipt{}, nil
	})
	t.Fatal("the function returned")
}
