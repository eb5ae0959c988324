package storage

import (
	"context"
	"errors"
	"time"
)

// Releaser is a Store that can release a key. It deletes the key's
// completed record, so that the key's next request runs fresh. It does so
// only when nothing the handler did can have been kept (CheckRelease). It
// is for operators whose client's retry keeps meeting a stored error that
// a fix has since made wrong. An example is a validation error of a
// request since corrected.
type Releaser interface {
	// Release deletes the record stored for key at now, if CheckRelease
	// allows it. The check and the delete run in one transaction. It
	// returns the record deleted. Otherwise it deletes nothing and returns
	// CheckRelease's error. Once it returns, no process sharing the store
	// answers from the released record any more. A store whose processes
	// keep completed records in memory makes sure of it before returning.
	Release(ctx context.Context, key RecordKey, now time.Time) (released *Record, err error)
}

// The refusals of Release, each saying why the record stays.
var (
	// ErrNoRecord: no live record for the key (never used, or expired).
	ErrNoRecord = errors.New("idempotency: no live record for the key")
	// ErrReleaseInFlight: a handler holds the key. Its result is not
	// stored yet.
	ErrReleaseInFlight = errors.New("idempotency: the key is in flight, its handler may still act")
	// ErrReleaseSuccess: the stored result is a success, whose effects
	// stand. Releasing it would let a retry do them twice.
	ErrReleaseSuccess = errors.New("idempotency: the stored result is a success; its effects stand")
	// ErrReleaseNotTransactional: the stored error is of a method that is
	// not transactional. Its handler may have acted outside the store
	// before it failed.
	ErrReleaseNotTransactional = errors.New("idempotency: the stored error is of a method that is not transactional; its handler may have acted")
)

// CheckRelease reports whether stored, the record of a key (nil when
// none), may be released at now. It returns nil only for a live stored
// error of a transactional method. That error's writes rolled back with
// it, so running the key again cannot do anything twice. Otherwise one of
// the errors above says why not.
func CheckRelease(stored *Record, now time.Time) error {
	switch {
	case stored == nil || !now.Before(stored.Expiry):
		return ErrNoRecord
	case stored.State != StateCompleted || stored.Result == nil:
		return ErrReleaseInFlight
	case stored.Result.Status == nil:
		return ErrReleaseSuccess
	case stored.Durability != Transactional:
		return ErrReleaseNotTransactional
	}
	return nil
}
