// Package podmove moves a principal from one pod to another: its
// idempotency records and payment intents, copied whole, so that every key
// replays after the move the bytes it replayed before.
//
// The move is a series of steps, each recorded in the principal's
// placement in etcd before the next begins, and each safe to run again.
// A mover that dies at any step leaves the principal served from exactly
// one pod; running the move again finishes it, and a move back to the
// source before the flip undoes it:
//
//	freeze   the placement records the move: replicas refuse the
//	         principal's new calls (UNAVAILABLE, retry after 1s)
//	fence    the source fences the principal (pgstore.DB.Fence): it waits
//	         for the claims in progress, then refuses every claim, so that
//	         a replica that missed the freeze writes nothing there
//	copy     the principal's rows are copied to the target in one
//	         transaction, and both sides' digests compared
//	flip     the target is unfenced and the placement names it
//	cleanup  the source's rows are deleted; its fence stays, for the
//	         replicas that have not learned of the flip
package podmove

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/pgstore"
)

// The steps, as a move's placement records the last one done.
const (
	StepFreeze  = "freeze"
	StepFence   = "fence"
	StepCopy    = "copy"
	StepFlip    = "flip"
	StepCleanup = "cleanup"
)

// lockTTL is the lease of a mover's lock: a mover killed holds it this
// long.
const lockTTL = 10 * time.Second

// ErrStopped is Move's error when it stopped after Mover.StopAfter, as a
// mover killed there would.
var ErrStopped = errors.New("podmove: stopped after a step, as asked")

// Mover moves principals between pods.
type Mover struct {
	Dir  *placement.Directory
	Pods map[string]*pgstore.DB // each pod's database, by name
	By   string                 // who moves, for the placement and the logs
	Log  *slog.Logger
	// StopAfter, when set, stops a move after that step, for the tests
	// of a mover that dies there.
	StopAfter string
}

// tables are what a move copies: the records' and the intents'.
var tables = func() map[string]string {
	t := maps.Clone(pgstore.ScopedTables)
	maps.Copy(t, pgintents.ScopedTables)
	return t
}()

// Move moves principal to pod to, or finishes or undoes the move that
// a mover before it began. It holds the principal's mover lock while it
// runs: a second mover is refused.
func (m *Mover) Move(ctx context.Context, principal, to string) error {
	if m.Pods[to] == nil {
		return fmt.Errorf("podmove: no pod %q", to)
	}
	unlock, err := m.Dir.Lock(ctx, principal, m.By, lockTTL)
	if err != nil {
		return err
	}
	defer unlock()
	for {
		pl, ok, err := m.Dir.Read(ctx, principal)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("podmove: %s is placed nowhere: it has nothing to move", principal)
		case m.Pods[pl.Pod] == nil:
			return fmt.Errorf("podmove: %s is on pod %q, which the pods file does not name", principal, pl.Pod)
		case pl.Move != nil && m.Pods[pl.Move.To] == nil:
			return fmt.Errorf("podmove: %s is being moved to pod %q, which the pods file does not name", principal, pl.Move.To)
		}
		done, err := m.step(ctx, pl, to)
		if err != nil || done {
			return err
		}
	}
}

// step takes the next step of moving pl to to, and reports whether
// there is none left.
func (m *Mover) step(ctx context.Context, pl placement.Placement, to string) (done bool, err error) {
	switch mv := pl.Move; {
	case mv == nil && pl.Cleanup != "":
		return false, m.cleanup(ctx, pl)
	case mv == nil && pl.Pod == to:
		m.Log.Info("move: done", "principal", pl.Principal, "pod", to)
		return true, nil
	case mv == nil:
		return false, m.freeze(ctx, pl, to)
	case mv.To != to && to == pl.Pod:
		return true, m.undo(ctx, pl)
	case mv.To != to:
		return true, fmt.Errorf("podmove: %s is being moved to %s (move %s by %s since %s): finish it (--to %s) or undo it (--to %s) first",
			pl.Principal, mv.To, mv.ID, mv.By, mv.Since.Format(time.RFC3339), mv.To, pl.Pod)
	case mv.Step == StepFreeze:
		return false, m.fence(ctx, pl)
	case mv.Step == StepFence:
		return false, m.copy(ctx, pl)
	default: // StepCopy
		return false, m.flip(ctx, pl)
	}
}

// freeze records the move in the placement: replicas refuse the
// principal's new calls from when they see it.
func (m *Mover) freeze(ctx context.Context, pl placement.Placement, to string) error {
	id := make([]byte, 6)
	rand.Read(id)
	next := pl
	next.Move = &placement.Move{ID: "m-" + hex.EncodeToString(id), To: to, Step: StepFreeze, By: m.By, Since: time.Now().UTC().Truncate(time.Second)}
	return m.record(ctx, pl, next, StepFreeze)
}

// fence fences the principal on the source, once its claims in progress
// have ended.
func (m *Mover) fence(ctx context.Context, pl placement.Placement) error {
	note := fmt.Sprintf("moved to pod %s by move %s", pl.Move.To, pl.Move.ID)
	if err := m.Pods[pl.Pod].Fence(ctx, pl.Principal, note); err != nil {
		return fmt.Errorf("podmove: fencing %s on pod %s: %w", pl.Principal, pl.Pod, err)
	}
	return m.advance(ctx, pl, StepFence)
}

// copy copies the principal's rows to the target and checks them there.
func (m *Mover) copy(ctx context.Context, pl placement.Placement) error {
	src, dst := m.Pods[pl.Pod].Pool(), m.Pods[pl.Move.To].Pool()
	n, err := copyScope(ctx, src, dst, pl.Principal, tables)
	if err != nil {
		return fmt.Errorf("podmove: copying %s from pod %s to pod %s: %w", pl.Principal, pl.Pod, pl.Move.To, err)
	}
	from, err := digest(ctx, src, pl.Principal, tables)
	if err != nil {
		return err
	}
	got, err := digest(ctx, dst, pl.Principal, tables)
	if err != nil {
		return err
	}
	if from != got {
		return fmt.Errorf("podmove: %s's copy on pod %s differs from pod %s's rows:\n%s\n%s", pl.Principal, pl.Move.To, pl.Pod, got, from)
	}
	m.Log.Info("move: copied", "principal", pl.Principal, "move", pl.Move.ID, "rows", n)
	return m.advance(ctx, pl, StepCopy)
}

// flip opens the target and makes it the principal's pod, in one
// compare-and-set that also ends the freeze.
func (m *Mover) flip(ctx context.Context, pl placement.Placement) error {
	if err := m.Pods[pl.Move.To].Unfence(ctx, pl.Principal); err != nil {
		return err
	}
	return m.record(ctx, pl, placement.Placement{Pod: pl.Move.To, Cleanup: pl.Pod}, StepFlip)
}

// cleanup deletes the principal's rows from the pod it left, keeping the
// fence there.
func (m *Mover) cleanup(ctx context.Context, pl placement.Placement) error {
	db := m.Pods[pl.Cleanup]
	if db == nil {
		return fmt.Errorf("podmove: %s's copies are left on pod %q, which the pods file does not name: give the file that does", pl.Principal, pl.Cleanup)
	}
	if err := deleteScope(ctx, db.Pool(), pl.Principal, tables); err != nil {
		return fmt.Errorf("podmove: deleting %s's rows from pod %s: %w", pl.Principal, pl.Cleanup, err)
	}
	return m.record(ctx, pl, placement.Placement{Pod: pl.Pod}, StepCleanup)
}

// undo ends a move before its flip: the principal stays on its pod,
// which is opened again, and the target's copies are deleted.
func (m *Mover) undo(ctx context.Context, pl placement.Placement) error {
	if err := deleteScope(ctx, m.Pods[pl.Move.To].Pool(), pl.Principal, tables); err != nil {
		return err
	}
	if err := m.Pods[pl.Pod].Unfence(ctx, pl.Principal); err != nil {
		return err
	}
	m.Log.Info("move: undone", "principal", pl.Principal, "move", pl.Move.ID, "pod", pl.Pod)
	return m.record(ctx, pl, placement.Placement{Pod: pl.Pod}, "undo")
}

// advance records step as the move's last step done.
func (m *Mover) advance(ctx context.Context, pl placement.Placement, step string) error {
	next := pl
	mv := *pl.Move
	mv.Step = step
	next.Move = &mv
	return m.record(ctx, pl, next, step)
}

// record swaps pl for next in the directory, logs step, and stops there if
// asked to.
func (m *Mover) record(ctx context.Context, pl, next placement.Placement, step string) error {
	if _, err := m.Dir.Swap(ctx, pl, next); err != nil {
		return fmt.Errorf("podmove: recording step %s of %s: %w", step, pl.Principal, err)
	}
	m.Log.Info("move: step", "principal", pl.Principal, "step", step, "pod", next.Pod)
	if step == m.StopAfter {
		return ErrStopped
	}
	return nil
}
