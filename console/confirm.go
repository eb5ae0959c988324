package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// confirmed is what an operator saw of a record when they confirmed its
// release: its attempt and when that attempt began. The confirmation's
// form carries it, and the store releases the record only while it still
// matches (storage.Seen). Otherwise the key was taken over, or its record
// expired and the key was used again: the operator never saw what it holds.
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
// checks them. It returns the zero Seen when r names no attempt: a
// release by the JSON API need not. Attempt 0, which no record has, is
// refused rather than read as no attempt.
func confirmedQuery(r *http.Request) (storage.Seen, error) {
	var seen storage.Seen
	a := r.FormValue("attempt")
	if a == "" {
		return seen, nil
	}
	n, err := strconv.ParseUint(a, 10, 64)
	if err != nil || n == 0 {
		return seen, fmt.Errorf("%w: attempt %q is not a number from 1", errBadQuery, a)
	}
	seen.Attempt = n
	if ct := r.FormValue("claim_time"); ct != "" {
		if seen.ClaimTime, err = time.Parse(time.RFC3339Nano, ct); err != nil {
			return storage.Seen{}, fmt.Errorf("%w: claim_time %q is not an RFC 3339 time", errBadQuery, ct)
		}
	}
	return seen, nil
}
