package interceptor_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/interceptor"
)

// Every WithObserver observes, and a store failure's cause, which the
// caller is told only as UNAVAILABLE, is logged through WithLogger with no
// observer written for it.
func TestObservers_AllObserve_StoreFailureLogged(t *testing.T) {
	first, second := &recordingObserver{}, &recordingObserver{}
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedBuffer{mu: &mu, b: &logged}, nil))
	h, fs := startFaulty(t, interceptor.WithObserver(first), interceptor.WithObserver(second), interceptor.WithLogger(logger))
	if a := h.send("tok", "k1", payload("x")); a.err != nil {
		t.Fatal(a.err)
	}
	fs.failClaim.Store(true)
	h.send("tok", "k2", payload("y"))
	for name, o := range map[string]*recordingObserver{"first": first, "second": second} {
		o.mu.Lock()
		if o.claimed != 1 || len(o.finished) != 2 || o.finished[1].Code != code.Code_UNAVAILABLE {
			t.Errorf("%s observer: claimed %d, finished %v; want 1, and two, the second UNAVAILABLE", name, o.claimed, o.finished)
		}
		o.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if log := logged.String(); !strings.Contains(log, `"msg":"idempotency: store failed"`) || !strings.Contains(log, `"code":"Unavailable"`) || !strings.Contains(log, "injected") {
		t.Errorf("the store failure's cause was not logged:\n%s", log)
	}
}
