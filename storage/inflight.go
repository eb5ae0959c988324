package storage

import (
	"context"
	"strings"
)

// InFlightLister is a Store that lists the claims in flight now. An
// operator reads it to find keys held by a slow handler or left by a
// crashed one. A page costs the claims it returns, not the records stored.
// To list them, a store keeps its claims in flight apart, in an index or
// in its memory.
type InFlightLister interface {
	// InFlight returns up to limit claims in flight. Those of ended
	// processes are included until they are taken over. They come in an
	// order of the store's own, the same on every call. The list starts
	// after the key after, or from the first for the zero RecordKey. A
	// store may keep a claim only in the memory of the process that holds
	// it, as for a transactional claim not yet committed. Only that process
	// lists it.
	InFlight(ctx context.Context, after RecordKey, limit int) ([]KeyedRecord, error)
}

// KeyFinder is a store that finds the records of a key whatever their scope.
// Operators often know only the idempotency key a client sent.
type KeyFinder interface {
	// FindKey returns up to limit records stored under key, live or
	// expired, in any scope. They come ordered by scope (CompareKeys). A
	// transactional claim not yet committed is not stored, so not found.
	FindKey(ctx context.Context, key string, limit int) ([]KeyedRecord, error) // ordered by scope
}

// KeyedRecord is a record with the key it is stored for.
type KeyedRecord struct {
	Key    RecordKey
	Record *Record
}

// CompareKeys orders record keys by scope, then key, byte by byte. It is
// an order for InFlight's pages.
func CompareKeys(a, b RecordKey) int {
	if c := strings.Compare(a.Scope, b.Scope); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// MergeInFlight merges two lists of claims in flight, each in the order of
// cmp, into one of at most limit. Where both hold a key, it keeps a's
// record. It is for a store whose claims are partly in its memory (a) and
// partly stored (b). The memory is the fresher.
func MergeInFlight(a, b []KeyedRecord, limit int, cmp func(a, b RecordKey) int) []KeyedRecord {
	out := make([]KeyedRecord, 0, min(limit, len(a)+len(b)))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		switch {
		case len(b) == 0:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0:
			out, b = append(out, b[0]), b[1:]
		default:
			switch c := cmp(a[0].Key, b[0].Key); {
			case c < 0:
				out, a = append(out, a[0]), a[1:]
			case c > 0:
				out, b = append(out, b[0]), b[1:]
			default:
				out, a, b = append(out, a[0]), a[1:], b[1:]
			}
		}
	}
	return out
}
