package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
)

// Page sizes of the list of keys in flight.
const (
	defaultPage = 50
	maxPage     = 500
)

// inFlightPage is one page of the keys in flight. The JSON names are for
// scripts.
type inFlightPage struct {
	Claims []inFlightClaim `json:"claims"`
	// Next is where the next page starts; null on the last page.
	Next *pageCursor `json:"next"`
	// listed are the claims, as the page's rows judge them.
	listed []current
}

// inFlightClaim is a key in flight: its record's view, with how long its
// attempt has run. The age is null when the record does not say.
type inFlightClaim struct {
	*recordview.View
	AgeSeconds *float64 `json:"age_seconds"`
}

// pageCursor is where a page starts: after this principal and key.
type pageCursor struct {
	AfterPrincipal string `json:"after_principal"`
	AfterKey       string `json:"after_key"`
}

// query is c as the query string of the next page's URL.
func (c *pageCursor) query(limit int) string {
	q := url.Values{"after_principal": {c.AfterPrincipal}, "after_key": {c.AfterKey}}
	if limit != defaultPage {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q.Encode()
}

// pageQuery reads where r's page starts and how many claims it holds.
// The page starts from the first when after_principal and after_key are
// both absent. Otherwise it starts after the key they name, which must be
// one a record can have.
func pageQuery(r *http.Request) (after storage.RecordKey, limit int, err error) {
	limit = defaultPage
	if s := r.FormValue("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxPage {
			return after, 0, fmt.Errorf("%w: limit %q is not a number from 1 to %d", errBadQuery, s, maxPage)
		}
	}
	p, k := r.FormValue("after_principal"), r.FormValue("after_key")
	if p == "" && k == "" {
		return after, limit, nil
	}
	if after, err = validKey(p, k); err != nil {
		return after, 0, fmt.Errorf("after_principal and after_key name no page: %w", err)
	}
	return after, limit, nil
}

// listInFlight reads the page r asks for, logging it with op's name.
func (s *Console) listInFlight(r *http.Request, op operator, after storage.RecordKey, limit int) (*inFlightPage, error) {
	claims, err := s.c.Store.InFlight(r.Context(), after, limit+1) // one more: is there a next page?
	if err != nil {
		s.c.Log.ErrorContext(r.Context(), "console in-flight list failed", "operator", op.name, "err", err)
		return nil, err
	}
	s.c.Log.InfoContext(r.Context(), "console in-flight list", "operator", op.name, "claims", min(len(claims), limit))
	now := s.c.Now()
	page := &inFlightPage{Claims: []inFlightClaim{}}
	for _, c := range claims[:min(len(claims), limit)] {
		ic := inFlightClaim{View: recordview.New(c.Key, c.Record, now)}
		if !c.Record.ClaimTime.IsZero() {
			age := now.Sub(c.Record.ClaimTime).Round(time.Millisecond).Seconds()
			ic.AgeSeconds = &age
		}
		page.Claims = append(page.Claims, ic)
		page.listed = append(page.listed, listedClaim(c.Record))
	}
	if len(claims) > limit {
		last := claims[limit-1].Key
		page.Next = &pageCursor{AfterPrincipal: last.Scope, AfterKey: last.Key}
	}
	return page, nil
}

// apiInFlight answers GET /api/v1/in-flight[?after_principal=P&after_key=K][&limit=N].
// It returns a page of the keys in flight, in the store's order, and the
// query of the next.
func (s *Console) apiInFlight(w http.ResponseWriter, r *http.Request, op operator) {
	after, limit, err := pageQuery(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	page, err := s.listInFlight(r, op, after, limit)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the list failed; the server's log says why"})
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// pageInFlight answers GET /in-flight: the keys in flight as a table, a
// page at a time.
func (s *Console) pageInFlight(w http.ResponseWriter, r *http.Request, op operator) {
	d := s.pageOf(op)
	d.InFlight = true
	after, limit, err := pageQuery(r)
	if err != nil {
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
		return
	}
	page, err := s.listInFlight(r, op, after, limit)
	if err != nil {
		d.Error = "the list failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	now := s.c.Now()
	for i, c := range page.Claims {
		d.Claims = append(d.Claims, claimRow{
			View:      c.View,
			Age:       since(c.ClaimTime, now),
			Lease:     leaseText(c.LeaseExpiry, now),
			NextRetry: s.retryOutlook(page.listed[i], now).brief,
			Link:      keyLink(c.Principal, c.Key),
		})
	}
	if page.Next != nil {
		d.NextPage = "/in-flight?" + page.Next.query(limit)
	}
	s.render(w, http.StatusOK, d)
}

// listedClaim is rec, listed in flight, as the console judges it. A
// transactional claim is never stored in flight: one listed is held in
// this process's memory. Any other is taken as stored, which claims
// nothing of who holds it.
func listedClaim(rec *storage.Record) current {
	return current{rec: rec, stored: rec.Durability != storage.Transactional}
}

// claimRow is a row of the page's table of keys in flight.
type claimRow struct {
	*recordview.View
	Age, Lease string
	NextRetry  string // what a retry gets, in brief
	Link       string // the key page
}

// since is how long ago t was, for a person; "unknown" without t.
func since(t *time.Time, now time.Time) string {
	if t == nil {
		return "unknown"
	}
	return now.Sub(*t).Round(time.Second).String()
}

// leaseText says when a claim's lease runs out, or that it has. What a
// retry gets then depends on more than the lease (see retryOutlook).
func leaseText(t *time.Time, now time.Time) string {
	switch {
	case t == nil:
		return "none"
	case t.After(now):
		return "runs out in " + t.Sub(now).Round(time.Second).String()
	default:
		return "ran out " + now.Sub(*t).Round(time.Second).String() + " ago"
	}
}
