package robustness

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// paymentsd release, as an operation of the key's partition: now and then
// (releasesPerRun times a run, at moments the seed picks) the releaser
// takes a key whose create the service refused with an error it stored
// (INVALID_ARGUMENT: amount 0, a pool key's second body, see amountOf),
// runs the real binary's release subcommand on it (bbolt: through the
// running server's admin socket; PostgreSQL: through the database URL),
// and then sends the corrected request (the key's first body) with the
// same key, which must run fresh once the release is acknowledged.

const releasesPerRun = 2

// Refusals of a release, from the words paymentsd release says them in
// (recordview/refusal.go).
var releaseRefusals = []struct{ words, refusal string }{
	{"no live record", "no_record"},
	{"in flight", "in_flight"},
	{"is a success", "success"},
	{"not transactional", "not_transactional"},
}

// invalidBody says whether body of key is the one the service refuses
// (amount 0): its stored result is an error, which a release may clear.
func invalidBody(key string, body int) bool {
	return keyIndex(key)%4 == 3 && body == 1
}

// releaser runs the run's releases until stop, on keys the workload has
// seen refused with a stored error, recording each release and the
// corrected create after it.
func (c *cluster) releaser(rng *rand.Rand, w *workload, ep *endpoint, bin, db string, d time.Duration, stop *atomic.Bool, durable bool) {
	start := time.Now()
	client := c.clientBase + burstClients + 1
	for i := range releasesPerRun {
		at := start.Add(d/5 + time.Duration(rng.Int64N(int64(d*3/5/releasesPerRun))) + time.Duration(i)*d*3/5/releasesPerRun)
		time.Sleep(time.Until(at))
		for !stop.Load() {
			p, k, ok := w.refused(rng)
			if !ok {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			// Each tried again while its outcome is unknown (a fault
			// under way), a few times.
			c.whileUnknown(func() *op {
				return &op{Client: client, Face: "cli", Kind: opRelease, Principal: p, Key: keyName(k), Durable: durable}
			}, func(o *op) { runRelease(o, bin, db) })
			c.whileUnknown(func() *op {
				return &op{Client: client, Face: "grpc", Kind: opCreate, Principal: p, Key: keyName(k), Body: 0}
			}, ep.do)
			break
		}
	}
}

// whileUnknown runs and records the operation mk makes, again (up to ten
// times) while its outcome is unknown.
func (c *cluster) whileUnknown(mk func() *op, do func(*op)) {
	for try := 0; try < 10; try++ {
		o := mk()
		o.Call = c.h.now()
		do(o)
		o.Return = c.h.now()
		c.h.add(o)
		c.note("release", "%s", o)
		if !o.Unknown {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// runRelease runs paymentsd release for o's key and fills in its outcome:
// OK when released, the refusal when refused, unknown when it failed.
func runRelease(o *op, bin, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "release", "--token-stdin", "--key", o.Key, "--db", db)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(tokens[o.Principal])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	o.Err = strings.TrimSpace(stderr.String())
	var exit *exec.ExitError
	switch {
	case err == nil:
		o.Code = codes.OK
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		o.Code = codes.FailedPrecondition
		for _, r := range releaseRefusals {
			if strings.Contains(o.Err, r.words) {
				o.Reason = r.refusal
				break
			}
		}
	default:
		// It failed (exit 3: the server or the database did not answer):
		// the release may have been done.
		o.Code, o.Unknown = codes.Unavailable, true
		if o.Err == "" {
			o.Err = err.Error()
		}
	}
}

// stepRelease is a release in the key's partition: acknowledged, it
// clears a stored error (the key runs fresh next); refused, it leaves the
// state, for the reason the state gives; unknown, it may have done either.
// The record it cleared is kept as stale: creates that overlap the release
// may still be answered from it (see keyState).
// A build with durable claims stores no error a release may clear.
func stepRelease(s keyState, o *op) (bool, keyState) {
	stored := s.body >= 0
	releasable := stored && invalidBody(o.Key, s.body) && !o.Durable
	switch {
	case o.Unknown:
		if releasable {
			return true, keyState{body: -1, stale: record{s.body, s.result}}
		}
		return true, s
	case o.Code == codes.OK:
		return releasable, keyState{body: -1, stale: record{s.body, s.result}}
	}
	switch o.Reason {
	case "no_record":
		return !stored, s
	case "success":
		return stored && !invalidBody(o.Key, s.body), s
	case "not_transactional":
		return stored && invalidBody(o.Key, s.body) && o.Durable, s
	case "in_flight":
		// A claim running, or (PostgreSQL) one holding the key's lock
		// past the lock timeout: not the model's to see.
		return true, s
	}
	return false, s
}
