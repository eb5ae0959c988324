package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// confirmed is what an operator saw of a record when they confirmed its
// release: its attempt and when that attempt began. A release goes ahead
// only while the record still matches. Otherwise the key was taken over,
// or released and used again, and the operator never saw what it holds.
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

// errChanged refuses a release whose record no longer matches what the
// operator confirmed.
var errChanged = errors.New("the record changed since the release was confirmed")

// changedText says why a release was refused for errChanged.
const changedText = "the record changed since you confirmed: it is not the one you saw; nothing was released; look at the key again"

// confirmedQuery reads the attempt and claim_time r confirms. Its ok is
// false when r names no attempt: a release by the JSON API need not.
func confirmedQuery(r *http.Request) (c confirmed, ok bool, err error) {
	a := r.FormValue("attempt")
	if a == "" {
		return c, false, nil
	}
	if c.Attempt, err = strconv.ParseUint(a, 10, 64); err != nil {
		return c, false, fmt.Errorf("%w: attempt %q is not a number", errBadQuery, a)
	}
	c.ClaimTime = r.FormValue("claim_time")
	return c, true, nil
}

// checkConfirmed returns errChanged unless the record stored for k
// matches want. It logs a refusal as every release's is logged.
//
// The read and the release are two transactions. Between them the record
// can only be released, or expire and be replaced: the second cannot be
// told from the first by the store's Release.
func (s *Console) checkConfirmed(r *http.Request, op operator, k storage.RecordKey, want confirmed) error {
	rec, err := s.c.Store.Get(r.Context(), k)
	if err != nil || rec == nil {
		return err // no record: Release itself refuses
	}
	if got := confirmedOf(rec); got != want {
		s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "idempotency key release refused",
			slog.String("operator", op.name), slog.String("principal_hash", auth.PrincipalHash(k.Scope)), slog.String("key", k.Key),
			slog.String("outcome", "refused"), slog.String("refusal", "changed"),
			slog.Uint64("attempt", got.Attempt), slog.Uint64("confirmed_attempt", want.Attempt))
		return errChanged
	}
	return nil
}
