package pods

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// each calls fn for every pod at once, and returns their errors joined,
// each named by its pod. A pod down delays no other.
func (r *Router) each(fn func(i int, p Pod) error) error {
	errs := make([]error, len(r.pods))
	var wg sync.WaitGroup
	for i, p := range r.pods {
		wg.Go(func() {
			if err := fn(i, p); err != nil {
				errs[i] = fmt.Errorf("pod %s: %w", p.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Sweep sweeps every pod at once and returns how many records went. A pod
// that failed is named in the error; the others' sweeps count.
func (r records) Sweep(ctx context.Context, now time.Time) (int, error) {
	counts := make([]int, len(r.pods))
	err := r.each(func(i int, p Pod) (err error) {
		counts[i], err = p.Backend.Records().Sweep(ctx, now)
		return err
	})
	var n int
	for _, c := range counts {
		n += c
	}
	return n, err
}

// CountRecords is the sum of every pod's count.
func (r records) CountRecords(ctx context.Context) (int64, error) {
	counts := make([]int64, len(r.pods))
	err := r.each(func(i int, p Pod) (err error) {
		counts[i], err = p.Backend.Records().CountRecords(ctx)
		return err
	})
	var n int64
	for _, c := range counts {
		n += c
	}
	return n, err
}

// InFlight lists the claims in flight in every pod, merged in
// storage.CompareKeys order. Each pod's list is in that order too: its
// scopes and keys compare bytewise. It fails if any pod does: a page with
// a pod missing would skip its claims for good.
func (r records) InFlight(ctx context.Context, after storage.RecordKey, limit int) ([]storage.KeyedRecord, error) {
	lists := make([][]storage.KeyedRecord, len(r.pods))
	err := r.each(func(i int, p Pod) (err error) {
		lists[i], err = p.Backend.Records().InFlight(ctx, after, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return r.merge(lists, limit), nil
}

// FindKey finds the key's records in every pod, ordered by scope. A pod
// that fails fails the lookup, rather than answer that it is not there.
func (r records) FindKey(ctx context.Context, key string, limit int) ([]storage.KeyedRecord, error) {
	lists := make([][]storage.KeyedRecord, len(r.pods))
	err := r.each(func(i int, p Pod) (err error) {
		if f, ok := p.Backend.Records().(storage.KeyFinder); ok {
			lists[i], err = f.FindKey(ctx, key, limit)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return r.merge(lists, limit), nil
}

// merge merges lists, each in CompareKeys order, into one of at most
// limit. A record of a scope placed on another pod than the one it was
// found in is a leftover copy, and is dropped.
func (r *Router) merge(lists [][]storage.KeyedRecord, limit int) []storage.KeyedRecord {
	var all []storage.KeyedRecord
	for i, list := range lists {
		for _, kr := range list {
			if pl, ok := r.dir.Lookup(kr.Key.Scope); !ok || pl.Pod == r.pods[i].Name {
				all = append(all, kr)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b storage.KeyedRecord) int { return storage.CompareKeys(a.Key, b.Key) })
	return all[:min(limit, len(all))]
}
