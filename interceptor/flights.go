package interceptor

import "sync"

// flights tracks the claims this process is running, so that duplicates
// waiting for them (WithInFlightWait) are woken the moment a result is
// stored, instead of polling the store.
type flights struct {
	mu sync.Mutex
	m  map[RecordKey]chan struct{}
}

// begin registers a claim of rk being run here; end with the channel.
func (f *flights) begin(rk RecordKey) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[RecordKey]chan struct{}{}
	}
	f.m[rk] = ch // a takeover here replaces a superseded attempt's entry
	return ch
}

// end wakes everyone waiting on the claim begin returned ch for.
func (f *flights) end(rk RecordKey, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[rk] == ch {
		delete(f.m, rk)
	}
	close(ch)
}

// done returns a channel closed when this process's run of rk ends, or nil
// when rk is not running here.
func (f *flights) done(rk RecordKey) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[rk]
}
