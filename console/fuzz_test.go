package console

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// FuzzPageQuery: any query of the keys in flight either is refused or
// names a page that starts from the first key or after a key a record can
// have, of 1 to maxPage claims; and the next page's query that the
// console writes reads back as the same page.
func FuzzPageQuery(f *testing.F) {
	f.Add("", "", "")
	f.Add("50", "alice", "order-1")
	f.Add("500", "dev:"+string(make([]byte, 64)), "k")
	f.Add("-1", "spiffe://example.org/shop", "a b")
	f.Add("1e3", "dns:shop.example", "\x00")
	f.Fuzz(func(t *testing.T, limit, principal, key string) {
		q := url.Values{}
		for name, v := range map[string]string{"limit": limit, "after_principal": principal, "after_key": key} {
			if v != "" {
				q.Set(name, v)
			}
		}
		after, n, err := pageQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: q.Encode()}})
		if err != nil {
			return
		}
		if n < 1 || n > maxPage {
			t.Fatalf("limit %q read as %d", limit, n)
		}
		if after != (storage.RecordKey{}) {
			if _, err := validKey(after.Scope, after.Key); err != nil {
				t.Fatalf("page after %+v, which names no key: %v", after, err)
			}
		}
		next := &pageCursor{AfterPrincipal: after.Scope, AfterKey: after.Key}
		again, m, err := pageQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: next.query(n)}})
		if after != (storage.RecordKey{}) && (err != nil || again != after || m != n) {
			t.Fatalf("next page's query %q read back as %+v, %d, %v; want %+v, %d", next.query(n), again, m, err, after, n)
		}
	})
}

// FuzzConfirmedQuery: a release form's attempt is confirmed exactly when
// it is given and is a decimal number, which is what it reads as; a
// claim time is kept as sent, to be compared, never parsed.
func FuzzConfirmedQuery(f *testing.F) {
	f.Add("", "")
	f.Add("1", "2026-12-03T11:41:57.123456789Z")
	f.Add("18446744073709551616", "x")
	f.Add("-1", "")
	f.Add("0x10", "\x00")
	f.Fuzz(func(t *testing.T, attempt, claimTime string) {
		q := url.Values{"attempt": {attempt}, "claim_time": {claimTime}}
		c, ok, err := confirmedQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: q.Encode()}})
		n, perr := strconv.ParseUint(attempt, 10, 64)
		switch {
		case attempt == "":
			if ok || err != nil {
				t.Fatalf("no attempt: ok %t, err %v", ok, err)
			}
		case perr != nil:
			if ok || err == nil {
				t.Fatalf("attempt %q: ok %t, err %v; want refused", attempt, ok, err)
			}
		case !ok || err != nil || c.Attempt != n || c.ClaimTime != claimTime:
			t.Fatalf("attempt %q, claim time %q: %+v, ok %t, err %v", attempt, claimTime, c, ok, err)
		}
	})
}
