package once

import (
	"sync"
	"sync/atomic"
	"time"
)

// minRetryDelay is the shortest retry delay an in-flight answer suggests.
// A retry sooner than that only finds the key in flight again.
const minRetryDelay = 10 * time.Millisecond

// handlerTimes keeps, per method, a moving average of how long its handler
// takes. A duplicate of a request in flight is then told to retry about
// when that request should be done, not a fixed second later.
type handlerTimes struct {
	m sync.Map // full method name → *atomic.Int64, nanoseconds
}

// observe folds one run of method's handler into its average. It weighs
// the newest run by 1/8. That is recent enough to follow a change, and
// steady enough that one slow run does not swing it.
func (h *handlerTimes) observe(method string, d time.Duration) {
	v, ok := h.m.Load(method)
	if !ok {
		n := new(atomic.Int64)
		n.Store(int64(d))
		if v, ok = h.m.LoadOrStore(method, n); !ok {
			return
		}
	}
	avg := v.(*atomic.Int64)
	for {
		old := avg.Load()
		if avg.CompareAndSwap(old, old+(int64(d)-old)/8) {
			return
		}
	}
}

// retryDelay is the delay an in-flight answer for method suggests. It is
// its handler's average time, within [minRetryDelay, maxRetryDelay]. It is
// never past the lease left: when the lease ends, the retry may take over.
// Before the method has run here, it is maxRetryDelay.
func (h *handlerTimes) retryDelay(method string, leaseLeft time.Duration) time.Duration {
	delay := maxRetryDelay
	if v, ok := h.m.Load(method); ok {
		delay = min(max(time.Duration(v.(*atomic.Int64).Load()), minRetryDelay), maxRetryDelay)
	}
	return min(delay, max(leaseLeft, 0))
}
