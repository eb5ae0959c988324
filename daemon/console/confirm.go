package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// confirmed is what an operator saw of a record when they confirmed its
// release: its attempt and when that attempt began. The confirmation's
// form carries it, and the store releases the record only while it still
// matches (storage.Seen). Otherwise the record was released, or it
// expired, and the key was used again: the operator never saw what it holds.
type confirmed struct {
	Attempt   uint64
	ClaimTime string // RFC 3339 with nanoseconds; empty when not kept
}

// confirmedOf is what rec shows for a confirmation.
func confirmedOf(rec *storage.Record) confirmed {
	c := confirmed{Attempt: rec.Attempt}
	if !rec.ClaimTime.IsZero() {
		c.ClaimTime = rec.ClaimTime.UTC().Format(time.RFC3339Nano)
	}
	return c
}

// confirmedQuery reads the attempt and claim_time r confirms, as Release
// checks them. It returns the zero Seen when r names neither: a release
// by the JSON API need not. A claim time without an attempt is refused,
// as is attempt 0, which no record has: neither may pass for no check.
// A claim time must be one a record can have, with a year from 1 to 9999
// in UTC, as the confirmation writes it.
func confirmedQuery(r *http.Request) (storage.Seen, error) {
	var seen storage.Seen
	a, ct := r.FormValue("attempt"), r.FormValue("claim_time")
	if a == "" {
		if ct != "" {
			return seen, fmt.Errorf("%w: claim_time without the attempt it began", errBadQuery)
		}
		return seen, nil
	}
	n, err := strconv.ParseUint(a, 10, 64)
	if err != nil || n == 0 {
		return seen, fmt.Errorf("%w: attempt %q is not a number from 1", errBadQuery, a)
	}
	seen.Attempt = n
	if ct != "" {
		t, err := time.Parse(time.RFC3339Nano, ct)
		if y := t.UTC().Year(); err != nil || y < 1 || y > 9999 {
			return storage.Seen{}, fmt.Errorf("%w: claim_time %q is not an RFC 3339 time of a record", errBadQuery, ct)
		}
		seen.ClaimTime = t
	}
	return seen, nil
}
