package console

import (
	"net/http"
	"net/url"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
)

// keyPage is what the key page shows of one record: its story from the
// first claim to the stored answer, and its releases.
type keyPage struct {
	*recordview.View
	StateText  string // the state in words, with what it means for a retry
	NextRetry  string // what a retry of a claim in flight gets, in words
	Attempts   string // the attempt count in words
	ClaimTime  string // when the attempt began, and how long ago
	Expiry     string // when the record is forgotten, and how soon
	Lease      string // when the lease of a claim in flight runs out
	Holder     string // which process made or holds a claim in flight, when known
	NoRelease  string // why a claim in flight is not released
	Response   string // the stored response, as protojson
	Error      bool   // the stored answer is an error
	Details    []detail
	Header     []metadataEntry
	Trailer    []metadataEntry
	IntentLink string
	JSONLink   string
	Releasable bool // storage.CheckRelease allows a release now
	// History says the store keeps the key's releases, Releases.
	History  bool
	Releases []releaseEntry
}

// keyLink is the key page's URL of key of principal.
func keyLink(principal, key string) string {
	return "/key?" + url.Values{"principal": {principal}, "key": {key}}.Encode()
}

// pageKeyRecord answers GET /key?principal=P&key=K: the key page.
func (s *Console) pageKeyRecord(w http.ResponseWriter, r *http.Request, op operator) {
	d, k, ok := s.pageKey(w, r, op)
	if !ok {
		return
	}
	l, err := s.find(r, op, k)
	if err != nil {
		d.Error = "the lookup failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	d.Lookup = l
	switch {
	case l.Released:
		d.ReleasedKey = &releasedKey{Principal: k.Scope, Key: k.Key, Message: l.Message, NextRequest: l.NextRequest,
			Releases: l.Releases, JSONLink: jsonLink(k)}
		s.render(w, http.StatusOK, d)
		return
	case !l.Found:
		s.render(w, http.StatusNotFound, d)
		return
	}
	d.KeyView = s.keyPageOf(k, l)
	s.render(w, http.StatusOK, d)
}

// keyPageOf is the key page of l, the lookup of k.
func (s *Console) keyPageOf(k storage.RecordKey, l *lookup) *keyPage {
	now := s.c.Now()
	v := l.Record
	p := &keyPage{
		View:       v,
		StateText:  stateText(v, l.cur, now),
		Attempts:   attemptsText(v.Attempt),
		Expiry:     v.Expiry.Format(time.RFC3339) + " (" + timeLeft(v.Expiry, now) + ")",
		Details:    l.Details,
		Header:     metadataRows(l.Header),
		Trailer:    metadataRows(l.Trailer),
		JSONLink:   jsonLink(k),
		Releasable: l.releasable,
		History:    l.Releases != nil,
		Releases:   l.Releases,
		Error:      v.Code != nil && *v.Code != code.Code_OK.String(),
	}
	if v.ClaimTime != nil {
		p.ClaimTime = v.ClaimTime.Format(time.RFC3339) + " (" + timeLeft(*v.ClaimTime, now) + ")"
	}
	if !v.Completed {
		s.describeClaim(p, l.cur, now)
	}
	if l.Response != nil {
		p.Response = string(l.Response)
	}
	if v.IntentID != nil {
		p.IntentLink = intentLink(k.Scope, *v.IntentID)
	}
	return p
}

// describeClaim fills in what p shows of c, a claim in flight: who holds
// it, its lease, what a retry gets, and why it is not released.
func (s *Console) describeClaim(p *keyPage, c current, now time.Time) {
	p.NextRetry = s.retryOutlook(c, now).full
	p.Lease = leaseText(p.LeaseExpiry, now)
	me, known := s.claimant()
	switch {
	case !c.stored:
		p.Lease += "; it does not apply while this process holds the claim"
		p.Holder = "this process, which holds the claim in its memory: it is not stored until it commits"
	case known && me.ID == p.Owner:
		p.Holder = "this process made the claim"
	case known && me.Exclusive:
		p.Holder = "an earlier process, which has ended: this store is used by one process at a time"
	case known:
		p.Holder = "another process made the claim"
	}
	p.NoRelease, _ = recordview.RefusalText(storage.ErrReleaseInFlight)
}

// jsonLink is the JSON API's URL of k's lookup.
func jsonLink(k storage.RecordKey) string {
	return "/api/v1/record?" + url.Values{"principal": {k.Scope}, "key": {k.Key}}.Encode()
}

// stateText is v's state in words. A completed record's says what it
// means for a retry. A claim's says who holds it: what a retry gets then
// is NextRetry.
func stateText(v *recordview.View, c current, now time.Time) string {
	switch {
	case v.Completed && v.State == recordview.StateExpired:
		return "expired: the key's next request runs fresh"
	case v.Completed:
		return "completed: a retry is answered with the stored answer below"
	case !c.stored:
		return "in flight: a handler of this process holds the key"
	case v.State == recordview.StateExpired:
		return "expired while in flight"
	case v.LeaseExpiry != nil && !v.LeaseExpiry.After(now):
		return "in flight, its lease ran out"
	}
	return "in flight: a handler holds the key"
}

// releasedKey is the page of a key that holds no record because it was
// released: its releases, and what its next request gets.
type releasedKey struct {
	Principal, Key string
	Message        string
	NextRequest    string
	Releases       []releaseEntry
	JSONLink       string
}

// releaseEntry is one release of a key, as the page and the JSON API show
// it.
type releaseEntry struct {
	Time     time.Time `json:"time"`
	Operator string    `json:"operator"`
	Attempt  uint64    `json:"attempt"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
}
