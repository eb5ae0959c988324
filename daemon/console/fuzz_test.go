package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/storage"
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
// it is given as a decimal number from 1, and then reads as that number.
// A claim time is accepted exactly when it is empty or an RFC 3339 time
// whose year in UTC is 1 to 9999, and only with an attempt. What is
// accepted matches the record it names and no other attempt or claim
// time, and the form the console writes of that record reads back as the
// same.
func FuzzConfirmedQuery(f *testing.F) {
	f.Add("", "")
	f.Add("", "2026-12-03T11:41:57Z")
	f.Add("1", "2026-12-03T11:41:57.123456789Z")
	f.Add("1", "2026-12-03T12:41:57.123456789+01:00")
	f.Add("1", "9999-12-31T23:00:00-23:00")
	f.Add("0", "")
	f.Add("18446744073709551616", "x")
	f.Add("-1", "")
	f.Add("0x10", "\x00")
	f.Fuzz(func(t *testing.T, attempt, claimTime string) {
		q := url.Values{"attempt": {attempt}, "claim_time": {claimTime}}
		seen, err := confirmedQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: q.Encode()}})
		n, perr := strconv.ParseUint(attempt, 10, 64)
		ct, terr := time.Parse(time.RFC3339Nano, claimTime)
		if y := ct.UTC().Year(); terr == nil && (y < 1 || y > 9999) {
			terr = errors.New("out of range")
		}
		switch {
		case attempt == "" && claimTime == "":
			if err != nil || seen != (storage.Seen{}) {
				t.Fatalf("no attempt: %+v, %v; want the zero Seen", seen, err)
			}
		case attempt == "" || perr != nil || n == 0 || claimTime != "" && terr != nil:
			if err == nil || seen != (storage.Seen{}) {
				t.Fatalf("attempt %q, claim time %q: %+v, %v; want refused", attempt, claimTime, seen, err)
			}
		case err != nil || seen.Attempt != n || !seen.ClaimTime.Equal(ct):
			t.Fatalf("attempt %q, claim time %q: %+v, %v", attempt, claimTime, seen, err)
		default:
			rec := &storage.Record{Attempt: n, ClaimTime: seen.ClaimTime}
			if !seen.Matches(rec) {
				t.Fatalf("%+v does not match the record it names", seen)
			}
			// The confirmation's form, written from the record, reads back
			// as the same Seen.
			c := confirmedOf(rec)
			form := url.Values{"attempt": {strconv.FormatUint(c.Attempt, 10)}, "claim_time": {c.ClaimTime}}
			back, err := confirmedQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: form.Encode()}})
			if err != nil || back.Attempt != seen.Attempt || !back.ClaimTime.Equal(seen.ClaimTime) {
				t.Fatalf("the form %v of %+v reads back as %+v, %v", form, seen, back, err)
			}
			other := *rec
			other.Attempt++
			if other.Attempt != 0 && seen.Matches(&other) {
				t.Fatalf("%+v matches attempt %d too", seen, other.Attempt)
			}
			other = *rec
			other.ClaimTime = rec.ClaimTime.Add(time.Nanosecond)
			if seen.Matches(&other) {
				t.Fatalf("%+v matches the claim time %v too", seen, other.ClaimTime)
			}
		}
	})
}

// FuzzSearchQuery: any query of a principal's intents or duplicates
// either is refused as a bad query (a 400) or names a search within the
// bounds the stores hold: times from 1971 to 2261, until after since, a
// window from 1ns to a day, a limit from 1 to server.MaxPageSize, and an
// after position before until whose id is UTF-8 text without NUL. The
// query the console writes of it, for the next page or the other page,
// reads back as the same search later on.
func FuzzSearchQuery(f *testing.F) {
	f.Add("24h", "", "", "", "", "")
	f.Add("2026-03-01T10:00:00Z", "2026-03-02T10:00:00+01:00", "10m", "50", "2026-03-01T12:00:00.123456789Z/pi_0123456789abcdef01234567", "0xABC")
	f.Add("0s", "", "1ns", "1000", "", "")
	f.Add("", "1h", "24h0m1s", "1001", "x/y", "")
	f.Add("-1h", "9999-12-31T23:00:00-23:00", "-1m", "0", "2026-01-01T00:00:00Z/", "\x00")
	f.Add("1970-12-31T23:59:59Z", "2262-01-01T00:00:00Z", "1e3s", "1e3", "2026-01-01T00:00:00Z/a/b", "")
	f.Add("2562047h", "", "", "", "2026-01-01T00:00:00Z/\xff", "")
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, since, until, window, limit, after, payer string) {
		q := url.Values{"principal": {"alice"}}
		for name, v := range map[string]string{"since": since, "until": until, "window": window, "limit": limit, "after": after, "payer": payer} {
			if v != "" {
				q.Set(name, v)
			}
		}
		s, err := searchQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: q.Encode()}}, now)
		if err != nil {
			if !errors.Is(err, errBadQuery) {
				t.Fatalf("%v refused, but not as a bad query: %v", q, err)
			}
			return
		}
		checkSearch(t, q, s)
		again, err := searchQuery(&http.Request{Method: "GET", URL: &url.URL{RawQuery: s.values().Encode()}}, now.Add(time.Hour))
		if err != nil || !sameSearch(again, s) {
			t.Fatalf("the console's query %q of %+v reads back as %+v, %v", s.values().Encode(), s, again, err)
		}
	})
}

// checkSearch fails t unless s, read from q, is a search the stores hold.
func checkSearch(t *testing.T, q url.Values, s intentSearch) {
	t.Helper()
	switch {
	case s.Owner != q.Get("principal") || s.Payer != q.Get("payer"):
		t.Fatalf("%v read as principal %q, payer %q", q, s.Owner, s.Payer)
	case !inRange(s.From) || s.From.Location() != time.UTC:
		t.Fatalf("%v read as since %v", q, s.From)
	case !s.To.IsZero() && (!inRange(s.To) || !s.To.After(s.From)):
		t.Fatalf("%v read as since %v until %v", q, s.From, s.To)
	case s.Window <= 0 || s.Window > maxWindow:
		t.Fatalf("%v read as window %v", q, s.Window)
	case s.Limit < 1 || s.Limit > server.MaxPageSize:
		t.Fatalf("%v read as limit %d", q, s.Limit)
	}
	if p := s.After; p != (server.Position{}) {
		if !inRange(p.CreateTime) || p.ID == "" || len(p.ID) > maxPositionID || !utf8.ValidString(p.ID) || strings.IndexByte(p.ID, 0) >= 0 ||
			!s.To.IsZero() && !p.CreateTime.Before(s.To) {
			t.Fatalf("%v read as after %+v", q, p)
		}
	}
}

// sameSearch reports whether a and b search the same intents.
func sameSearch(a, b intentSearch) bool {
	return a.Owner == b.Owner && a.Payer == b.Payer && a.Merchant == b.Merchant && a.Amount == b.Amount &&
		a.From.Equal(b.From) && a.To.Equal(b.To) && a.Window == b.Window && a.Limit == b.Limit &&
		a.After.CreateTime.Equal(b.After.CreateTime) && a.After.ID == b.After.ID
}
