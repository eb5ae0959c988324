package once

import (
	"context"
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// flights tracks the claims this process is running. Duplicates waiting
// for them (WithInFlightWait) are woken the moment a result is stored,
// instead of polling the store.
type flights struct {
	mu sync.Mutex
	m  map[storage.RecordKey]chan struct{}
}

// begin registers a claim of rk being run here. Pass the channel to end.
func (f *flights) begin(rk storage.RecordKey) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[storage.RecordKey]chan struct{}{}
	}
	f.m[rk] = ch // a takeover here replaces a superseded attempt's entry
	return ch
}

// end wakes everyone waiting on the claim begin returned ch for.
func (f *flights) end(rk storage.RecordKey, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[rk] == ch {
		delete(f.m, rk)
	}
	close(ch)
}

// done returns a channel closed when this process's run of rk ends. It
// returns nil when rk is not running here.
func (f *flights) done(rk storage.RecordKey) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[rk]
}

// inFlightWait is one duplicate's wait for the request in flight with its
// key to end. It waits up to limit. The run in this process (flights), the
// store's notice (a Watcher) or a poll wakes it, whichever comes first.
type inFlightWait struct {
	watcher   storage.Watcher // nil when the store is not one
	key       storage.RecordKey
	limit     time.Duration
	pollEvery time.Duration // doubles, up to 200ms, while no notice can come
	// watchedPollEvery is how often it polls while a notice can come.
	watchedPollEvery time.Duration

	giveUp, poll *time.Timer // made on the first wait
	watched      <-chan struct{}
	stopWatching func()
}

// watch starts watching the key through the store, and reports whether it
// did. It does not when the store is no Watcher or a watch is already on.
func (w *inFlightWait) watch() bool {
	if w.watcher == nil || w.watched != nil {
		return false
	}
	w.watched, w.stopWatching = w.watcher.Watch(w.key)
	return true
}

// wait returns once it is time to claim again. That is when local ends, a
// notice comes, or the poll is due. The channel local is the run in this
// process, nil when it runs elsewhere. The result timedOut says the whole
// wait is over. An error says that ctx ended.
func (w *inFlightWait) wait(ctx context.Context, local <-chan struct{}) (timedOut bool, err error) {
	wait := w.pollEvery
	switch {
	case w.watched != nil:
		wait = w.watchedPollEvery
	case w.giveUp != nil:
		w.pollEvery = min(2*w.pollEvery, 200*time.Millisecond)
		wait = w.pollEvery
	}
	if w.giveUp == nil {
		w.giveUp, w.poll = time.NewTimer(w.limit), time.NewTimer(wait)
	} else {
		w.poll.Reset(wait)
	}
	var pollC <-chan time.Time
	if local == nil {
		pollC = w.poll.C
	}
	select {
	case <-local:
	case <-w.watched: // a notice is used up: watch afresh
		w.stopWatching()
		w.watched, w.stopWatching = nil, nil
	case <-pollC:
	case <-w.giveUp.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}

// stop ends the wait's timers and watch.
func (w *inFlightWait) stop() {
	if w.giveUp != nil {
		w.giveUp.Stop()
		w.poll.Stop()
	}
	if w.stopWatching != nil {
		w.stopWatching()
	}
}
