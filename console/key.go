package console

import (
	"net/http"
	"net/url"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/recordview"
)

// keyPage is what the key page shows of one record: its story from the
// first claim to the stored answer, and its releases.
type keyPage struct {
	*recordview.View
	StateText  string // the state in words, with what it means for a retry
	Attempts   string // the attempt count in words
	ClaimTime  string // when the attempt began, and how long ago
	Expiry     string // when the record is forgotten, and how soon
	Lease      string // when the lease of a claim in flight runs out
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
	if !l.Found {
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
		StateText:  stateText(v, now),
		Attempts:   attemptsText(v.Attempt),
		Expiry:     v.Expiry.Format(time.RFC3339) + " (" + timeLeft(v.Expiry, now) + ")",
		Details:    l.Details,
		Header:     metadataRows(l.Header),
		Trailer:    metadataRows(l.Trailer),
		JSONLink:   "/api/v1/record?" + url.Values{"principal": {k.Scope}, "key": {k.Key}}.Encode(),
		Releasable: l.releasable,
		History:    l.Releases != nil,
		Releases:   l.Releases,
		Error:      v.Code != nil && *v.Code != code.Code_OK.String(),
	}
	if v.ClaimTime != nil {
		p.ClaimTime = v.ClaimTime.Format(time.RFC3339) + " (" + timeLeft(*v.ClaimTime, now) + ")"
	}
	if v.LeaseExpiry != nil {
		p.Lease = leaseText(v.LeaseExpiry, now)
	}
	if l.Response != nil {
		p.Response = string(l.Response)
	}
	if v.IntentID != nil {
		p.IntentLink = intentLink(k.Scope, *v.IntentID)
	}
	return p
}

// stateText is v's state in words, with what it means for the key's next
// request.
func stateText(v *recordview.View, now time.Time) string {
	switch {
	case v.State == recordview.StateExpired:
		return "expired: the key's next request runs fresh"
	case v.State == recordview.StateCompleted:
		return "completed: a retry is answered with the stored answer below"
	case v.LeaseExpiry != nil && !v.LeaseExpiry.After(now):
		return "in flight, its lease ran out: the next retry takes it over"
	}
	return "in flight: a handler holds the key; a retry waits or is told to try later"
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
