package interceptor_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/interceptor"
)

// countingObserver counts what it is told.
type countingObserver struct {
	mu                sync.Mutex
	claimed, finished int
	codes             []codes.Code
}

func (c *countingObserver) Claimed(context.Context, interceptor.Observation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claimed++
}

func (c *countingObserver) Finished(_ context.Context, o interceptor.Observation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished++
	c.codes = append(c.codes, o.Code)
}

// Every WithObserver observes, and a store failure's cause, which the
// caller is told only as UNAVAILABLE, is logged through WithLogger with no
// observer written for it.
func TestObservers_AllObserve_StoreFailureLogged(t *testing.T) {
	first, second := &countingObserver{}, &countingObserver{}
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedBuffer{mu: &mu, b: &logged}, nil))
	h, fs := startFaulty(t, interceptor.WithObserver(first), interceptor.WithObserver(second), interceptor.WithLogger(logger))
	if a := h.send("tok", "k1", payload("x")); a.err != nil {
		t.Fatal(a.err)
	}
	fs.failClaim.Store(true)
	h.send("tok", "k2", payload("y"))
	for name, o := range map[string]*countingObserver{"first": first, "second": second} {
		o.mu.Lock()
		if o.claimed != 1 || o.finished != 2 || o.codes[1] != codes.Unavailable {
			t.Errorf("%s observer: claimed %d, finished %d (%v); want 1, 2, the second UNAVAILABLE", name, o.claimed, o.finished, o.codes)
		}
		o.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if log := logged.String(); !strings.Contains(log, `"msg":"idempotency: store failed"`) || !strings.Contains(log, `"code":"Unavailable"`) || !strings.Contains(log, "injected") {
		t.Errorf("the store failure's cause was not logged:\n%s", log)
	}
}
