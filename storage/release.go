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
	// allows it and seen matches it, on behalf of the operator named by.
	// The checks and the delete run in one transaction. A store that is a
	// ReleaseHistory writes the release's ReleaseEntry in it too. Release
	// returns the record deleted. Otherwise it deletes nothing, records
	// nothing, and returns CheckRelease's error or ErrReleaseChanged. Once
	// it returns, no process sharing the store answers from the released
	// record any more. A store whose processes keep completed records in
	// memory makes sure of it before returning.
	Release(ctx context.Context, key RecordKey, now time.Time, by string, seen Seen) (released *Record, err error)
}

// Seen is what an operator saw of a record before asking for its
// release: its attempt and when that attempt began. Release deletes the
// record only while it still matches, in the same transaction as the
// delete. Between the look and the release, the record may have expired
// and a new one of the key taken its place; that one was never seen. The
// zero Seen, of a release with no look before it, matches any record.
//
// A record of a build that kept no claim time is told by its attempt
// alone.
type Seen struct {
	Attempt   uint64
	ClaimTime time.Time // zero for a record of a build that kept none
}

// Matches reports whether stored is the record s saw. The zero Seen
// matches any record. Any other matches only the record of its attempt
// and claim time; attempts start at 1, so one of attempt 0 matches none.
func (s Seen) Matches(stored *Record) bool {
	if s.Attempt == 0 && s.ClaimTime.IsZero() {
		return true
	}
	return stored.Attempt == s.Attempt && stored.ClaimTime.Equal(s.ClaimTime)
}

// A ReleaseEntry is one release of a key: what it held and who let it go.
type ReleaseEntry struct {
	Time    time.Time
	By      string // the operator's name from --admin-keys, or the CLI's fixed name
	Attempt uint64
	Code    int32 // the released stored error's code
	Message string
	// Expiry is when the entry is swept (see ReleaseExpiry).
	Expiry time.Time
}

// ReleaseHistory is a store that keeps its keys' releases.
type ReleaseHistory interface {
	// Releases returns the releases of key not yet swept, oldest first.
	Releases(ctx context.Context, key RecordKey) ([]ReleaseEntry, error)
}

// ReleaseRetention is how long a release is kept at least. An operator
// asking why a key ran twice finds it for that long.
const ReleaseRetention = 7 * 24 * time.Hour

// NewReleaseEntry is the entry of released, let go at now by by. It is
// kept until ReleaseExpiry.
func NewReleaseEntry(released *Record, now time.Time, by string) ReleaseEntry {
	e := ReleaseEntry{Time: now, By: by, Attempt: released.Attempt, Expiry: ReleaseExpiry(released, now)}
	if released.Result != nil && released.Result.Status != nil {
		e.Code, e.Message = released.Result.Status.Code, released.Result.Status.Message
	}
	return e
}

// ReleaseExpiry is when the entry of released, let go at now, is swept.
// That is ReleaseRetention after now, or the released record's own
// expiry if later. So the entry outlives the record it explains. The
// sweep that deletes expired records deletes expired entries too.
func ReleaseExpiry(released *Record, now time.Time) time.Time {
	if e := now.Add(ReleaseRetention); e.After(released.Expiry) {
		return e
	}
	return released.Expiry
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
	// ErrReleaseChanged: the record stored is not the one Seen. It was
	// released, or it expired, and the key was used again.
	ErrReleaseChanged = errors.New("idempotency: the record changed since it was seen")
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
