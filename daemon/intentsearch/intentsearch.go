// Package intentsearch answers an operator's questions about one
// principal's intents: which ones, newest first, by time, payer, merchant
// or amount; and which look like one payment made twice under two keys,
// the double charge of a client that makes a new key for each retry.
//
// Both read a store's scan of the principal's intents (a bounded scan of
// the paging index, server.IntentScanner), not an index of their own: a
// create costs nothing more.
package intentsearch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// Query selects a principal's intents.
type Query struct {
	Owner string
	// From and To bound the creation time, [From, To); a zero one does
	// not bound.
	From, To time.Time
	// Payer, Merchant and Amount, when set, must equal the intent's.
	// Addresses match in any case.
	Payer, Merchant, Amount string
}

// matches reports whether pi is one q selects, its time aside.
func (q Query) matches(pi *paymentsv1.PaymentIntent) bool {
	return (q.Payer == "" || strings.EqualFold(q.Payer, pi.GetPayer())) &&
		(q.Merchant == "" || strings.EqualFold(q.Merchant, pi.GetMerchant())) &&
		(q.Amount == "" || q.Amount == pi.GetAmount())
}

// before is where q's newest intent may sort at most.
func (q Query) before() server.Position {
	if q.To.IsZero() {
		return server.Position{}
	}
	return server.Position{CreateTime: q.To}
}

// MaxScan is the most intents one Page or Duplicates reads. A Page that
// reads them all without filling comes back short, with the position to
// go on from. Duplicates refuses a range of more (ErrTooMany): its answer
// would be partial.
const MaxScan = 250_000

// ErrTooMany says a range holds more than MaxScan intents: narrow it.
var ErrTooMany = errors.New("intentsearch: more intents in the range than one search reads")

// Page returns up to limit of q's intents, newest first, from after on
// (the zero Position: from the newest). next is the position the next
// page starts after, zero when no intent is left.
func Page(ctx context.Context, s server.IntentScanner, q Query, after server.Position, limit int) (page []server.FoundIntent, next server.Position, err error) {
	if limit < 1 {
		return nil, server.Position{}, fmt.Errorf("intentsearch: limit %d, want at least 1", limit)
	}
	if after == (server.Position{}) {
		after = q.before()
	}
	read, full := 0, false
	err = s.ScanIntents(ctx, q.Owner, q.From, after, func(f server.FoundIntent) (bool, error) {
		if full = len(page) == limit; full { // one more is there: another page follows
			return false, nil
		}
		read++
		next = server.PositionOf(f.Intent)
		if q.matches(f.Intent) {
			page = append(page, f)
		}
		return read < MaxScan, nil
	})
	if err != nil {
		return nil, server.Position{}, err
	}
	if !full && read < MaxScan {
		next = server.Position{} // the scan ran out: nothing is left
	}
	return page, next, nil
}

// Group is one suspected double payment: intents of a principal for the
// same payment (chain, token, payer, merchant and amount), under more than
// one key, each created within the window of the one before it. Newest
// first.
type Group []server.FoundIntent

// DefaultWindow is the window of Duplicates unless told another.
const DefaultWindow = 10 * time.Minute

// Store is what Duplicates reads: the scan, and each suspect in full.
type Store interface {
	server.IntentScanner
	GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error)
}

// sighting is what Duplicates keeps of each intent it reads, so that a
// range of many costs little memory. Suspects are read again in full.
type sighting struct {
	id, key string
	at      time.Time
}

// Duplicates returns q's suspected double payments, newest first: the
// groups with an intent created in [q.From, q.To). An intent made earlier,
// within window of one in the range, joins its group. Intents that q's
// payer, merchant or amount exclude are not read into any group.
func Duplicates(ctx context.Context, s Store, q Query, window time.Duration) ([]Group, error) {
	if window <= 0 {
		return nil, fmt.Errorf("intentsearch: window %v, want more than 0", window)
	}
	from := q.From
	if !from.IsZero() {
		from = from.Add(-window)
	}
	byPayment := map[[sha256.Size]byte][]sighting{}
	var order [][sha256.Size]byte // payments by their newest intent
	read := 0
	err := s.ScanIntents(ctx, q.Owner, from, q.before(), func(f server.FoundIntent) (bool, error) {
		if read++; read > MaxScan {
			return false, fmt.Errorf("%w (%d): narrow the time range", ErrTooMany, MaxScan)
		}
		if !q.matches(f.Intent) {
			return true, nil
		}
		p := payment(f.Intent)
		if _, seen := byPayment[p]; !seen {
			order = append(order, p)
		}
		byPayment[p] = append(byPayment[p], sighting{f.Intent.GetId(), f.Key, f.Intent.GetCreateTime().AsTime()})
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	var groups []Group
	for _, p := range order {
		for _, c := range clusters(byPayment[p], window, q.From) {
			g, err := readGroup(ctx, s, q.Owner, c)
			if err != nil {
				return nil, err
			}
			if len(g) > 1 {
				groups = append(groups, g)
			}
		}
	}
	slices.SortStableFunc(groups, func(a, b Group) int {
		return b[0].Intent.GetCreateTime().AsTime().Compare(a[0].Intent.GetCreateTime().AsTime())
	})
	return groups, nil
}

// clusters cuts one payment's sightings, newest first, where two follow
// each other by more than window. It keeps those under more than one key
// (an intent made without one counts as a key of its own) with one
// sighting at from or later.
func clusters(seen []sighting, window time.Duration, from time.Time) [][]sighting {
	var out [][]sighting
	for start := 0; start < len(seen); {
		end := start + 1
		for end < len(seen) && seen[end-1].at.Sub(seen[end].at) <= window {
			end++
		}
		c := seen[start:end]
		if !c[0].at.Before(from) && distinctKeys(c) {
			out = append(out, c)
		}
		start = end
	}
	return out
}

// distinctKeys reports whether c holds more than one key.
func distinctKeys(c []sighting) bool {
	for _, s := range c[1:] {
		if s.key != c[0].key || s.key == "" {
			return true
		}
	}
	return false
}

// readGroup reads a cluster's intents in full.
func readGroup(ctx context.Context, s Store, owner string, c []sighting) (Group, error) {
	g := make(Group, 0, len(c))
	for _, x := range c {
		pi, err := s.GetIntent(ctx, owner, x.id)
		if errors.Is(err, server.ErrNotFound) {
			continue // gone since the scan: report only what is there
		}
		if err != nil {
			return nil, err
		}
		g = append(g, server.FoundIntent{Owner: owner, Key: x.key, Intent: pi})
	}
	return g, nil
}

// payment names the payment pi asks for: the same chain, token, payer,
// merchant and amount name the same payment. Addresses are hex, so they
// are compared in lower case. Each field is written after its length, so
// that no two payments write the same bytes.
func payment(pi *paymentsv1.PaymentIntent) [sha256.Size]byte {
	var buf [256]byte
	b := buf[:0]
	for i, f := range []string{pi.GetChain(), pi.GetToken(), pi.GetPayer(), pi.GetMerchant(), pi.GetAmount()} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		for j := range len(f) {
			c := f[j]
			if i > 0 && i < 4 && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	return sha256.Sum256(b)
}
