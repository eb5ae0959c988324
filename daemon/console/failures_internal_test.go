package console

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Each address has its own allowance, and addresses whose allowance grew
// back are forgotten once too many are remembered.
func TestFailures_ByAddress(t *testing.T) {
	f, now := newFailures(), time.Now()
	from := func(addr string) *http.Request { return &http.Request{RemoteAddr: addr + ":4242"} }
	for range failuresBurst {
		f.failed(from("192.0.2.1"), now)
	}
	if f.wait(from("192.0.2.1"), now) <= 0 || f.wait(from("192.0.2.2"), now) != 0 {
		t.Fatalf("wait of the address that failed %d times: %v, of another: %v", failuresBurst, f.wait(from("192.0.2.1"), now), f.wait(from("192.0.2.2"), now))
	}
	for i := range maxAddrs {
		f.failed(from(fmt.Sprintf("10.0.%d.%d", i/256, i%256)), now)
	}
	later := now.Add(failuresBurst * failureEvery)
	f.failed(from("198.51.100.1"), later)
	if n := len(f.addrs); n != 1 {
		t.Errorf("%d addresses remembered after those that recovered were forgotten, want 1", n)
	}
}
