// Package memstore is a storage.Store in memory. It is the reference
// implementation of the claim rules. It serves tests, benchmarks and
// servers that accept losing their records on restart. It is not durable.
package memstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// Store keeps records in a map. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	records  map[storage.RecordKey]*storage.Record
	releases map[storage.RecordKey][]storage.ReleaseEntry
	claimant storage.Claimant
}

// New returns an empty store. Its claims are not exclusive. A store in
// memory cannot outlive its process, so it never meets an orphan.
func New() *Store {
	var id [8]byte
	rand.Read(id[:]) // never fails; see crypto/rand.Read
	return &Store{
		records:  map[storage.RecordKey]*storage.Record{},
		releases: map[storage.RecordKey][]storage.ReleaseEntry{},
		claimant: storage.Claimant{ID: fmt.Sprintf("memstore %x", id)},
	}
}

// Claim decides req under the store's lock. A ctx already done decides
// nothing and writes nothing.
func (s *Store) Claim(ctx context.Context, req storage.ClaimRequest) (storage.Outcome, *storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	outcome, rec := storage.Decide(s.records[req.Key], false, req, storage.Durable, s.claimant)
	if outcome.Claimed() {
		s.records[req.Key] = rec
	}
	return outcome, rec, nil
}

// Renew stores the renewed claim if it is still the stored one.
func (s *Store) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	return s.replace(ctx, key, claim)
}

// Complete stores the completed claim if it is still the stored one.
func (s *Store) Complete(ctx context.Context, key storage.RecordKey, done *storage.Record) error {
	return s.replace(ctx, key, done)
}

// replace writes r over the stored claim it renews or completes; a ctx
// already done writes nothing.
func (s *Store) replace(ctx context.Context, key storage.RecordKey, r *storage.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := storage.CheckClaim(s.records[key], r); err != nil {
		return err
	}
	stored := *r // the caller may change its record afterwards, as a renewing worker does
	s.records[key] = &stored
	return nil
}

// Get returns the record stored for key, live or expired, or nil when
// there is none.
func (s *Store) Get(ctx context.Context, key storage.RecordKey) (*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	if r == nil {
		return nil, nil
	}
	c := *r // the caller may change it
	return &c, nil
}

// Sweep deletes the records and release entries expired at now. It scans
// every one: fine for the sizes a store in memory holds.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.records {
		if !now.Before(r.Expiry) {
			delete(s.records, k)
			n++
		}
	}
	for k, entries := range s.releases {
		entries = slices.DeleteFunc(entries, func(e storage.ReleaseEntry) bool { return !now.Before(e.Expiry) })
		if len(entries) == 0 {
			delete(s.releases, k)
		} else {
			s.releases[k] = entries
		}
	}
	return n, nil
}

// CountRecords returns how many records the store holds, live or expired
// but not yet swept.
func (s *Store) CountRecords(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.records)), nil
}

var _ storage.Upkeep = (*Store)(nil)

// Claimant is who the store claims as.
func (s *Store) Claimant() storage.Claimant { return s.claimant }

// Close does nothing; the records stay for a store reopened by Reopen.
func (s *Store) Close() error { return nil }

// Reopen returns a store holding the same records under a new claimant.
// That is how a process that restarted would see a shared database. It
// serves the conformance suite's reopen test.
func (s *Store) Reopen() *Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := New()
	for k, r := range s.records {
		n.records[k] = r
	}
	for k, entries := range s.releases {
		n.releases[k] = slices.Clone(entries)
	}
	return n
}

var (
	_ storage.Releaser       = (*Store)(nil)
	_ storage.ReleaseHistory = (*Store)(nil)
	_ storage.KeyFinder      = (*Store)(nil)
)

// Release deletes key's record under the store's lock if
// storage.CheckRelease allows it at now and seen matches it, and keeps
// the release by by. A store in memory serves one process, which reads it
// directly. Nothing else remembers the record.
func (s *Store) Release(ctx context.Context, key storage.RecordKey, now time.Time, by string, seen storage.Seen) (*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	if err := storage.CheckRelease(r, now); err != nil {
		return nil, err
	}
	if !seen.Matches(r) {
		return nil, storage.ErrReleaseChanged
	}
	delete(s.records, key)
	s.releases[key] = append(s.releases[key], storage.NewReleaseEntry(r, now, by))
	return r, nil
}

// Releases returns key's releases not yet swept, oldest first.
func (s *Store) Releases(ctx context.Context, key storage.RecordKey) ([]storage.ReleaseEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.releases[key]), nil
}

// FindKey returns up to limit records of key, in any scope, ordered by
// scope. It scans every record: fine for the sizes a store in memory
// holds.
func (s *Store) FindKey(ctx context.Context, key string, limit int) ([]storage.KeyedRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var found []storage.KeyedRecord
	for k, r := range s.records {
		if k.Key == key {
			c := *r // the caller may change it
			found = append(found, storage.KeyedRecord{Key: k, Record: &c})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(found, func(a, b storage.KeyedRecord) int { return storage.CompareKeys(a.Key, b.Key) })
	return found[:min(limit, len(found))], nil
}

var _ storage.InFlightLister = (*Store)(nil)

// InFlight returns up to limit claims in flight after the key after, in
// storage.CompareKeys order. It sorts every claim in flight: fine for the
// sizes a store in memory holds.
func (s *Store) InFlight(ctx context.Context, after storage.RecordKey, limit int) ([]storage.KeyedRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var claims []storage.KeyedRecord
	for k, r := range s.records {
		if r.State == storage.StateInFlight && (after == storage.RecordKey{} || storage.CompareKeys(k, after) > 0) {
			c := *r // the caller may change it
			claims = append(claims, storage.KeyedRecord{Key: k, Record: &c})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(claims, func(a, b storage.KeyedRecord) int { return storage.CompareKeys(a.Key, b.Key) })
	return claims[:min(limit, len(claims))], nil
}
