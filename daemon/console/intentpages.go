package console

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// searchPage is what the pages /intents and /duplicates show: the search
// form as asked, and what the search found.
type searchPage struct {
	Duplicates bool // the duplicates page, not the list of intents
	Form       searchForm
	Searched   bool   // the search ran: its results follow
	Span       string // the principal and range searched, in words
	Intents    []intentRow
	NextPage   string
	Short      bool // the page read intentsearch.MaxScan intents without filling
	MaxScan    int
	Window     string
	Groups     []groupView
	Note       string // what a group of duplicates is not
	// OtherLink is the same range on the other page.
	OtherLink string
}

// searchForm is the search as its query gave it, to fill the form again.
type searchForm struct {
	Principal, Since, Until, Payer, Merchant, Amount, Window string
}

// groupView is a group of suspected double payments on the page.
type groupView struct {
	Title string // the payment, and how many intents and keys
	Rows  []intentRow
}

// pageIntents answers GET /intents: a page of a principal's intents,
// newest first, with a link to the next.
func (s *Console) pageIntents(w http.ResponseWriter, r *http.Request, op operator) {
	d, store, q, ok := s.searchPageOf(w, r, op, false)
	if !ok {
		return
	}
	a, err := s.listIntents(r, op, store, q)
	if err != nil {
		d.Error = "the search failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	p := d.Search
	p.Searched, p.Short, p.MaxScan = true, a.short, intentsearch.MaxScan
	p.Span = span(q) + ", newest first"
	for _, l := range a.Intents {
		p.Intents = append(p.Intents, rowOf(q.Owner, l))
	}
	if a.next != (server.Position{}) {
		next := q
		next.After = a.next
		p.NextPage = "/intents?" + next.values().Encode()
	}
	other := q
	other.After, other.Limit = server.Position{}, defaultPage
	p.OtherLink = "/duplicates?" + other.values().Encode()
	s.render(w, http.StatusOK, d)
}

// pageDuplicates answers GET /duplicates: a principal's suspected double
// payments, newest first. A range of too many intents is a 422.
func (s *Console) pageDuplicates(w http.ResponseWriter, r *http.Request, op operator) {
	d, store, q, ok := s.searchPageOf(w, r, op, true)
	if !ok {
		return
	}
	a, err := s.findDuplicates(r, op, store, q)
	switch {
	case errors.Is(err, intentsearch.ErrTooMany):
		d.Error = tooManyText
		s.render(w, http.StatusUnprocessableEntity, d)
		return
	case err != nil:
		d.Error = "the search failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	p := d.Search
	p.Searched, p.Window, p.Note = true, a.Window, suspectNote
	p.Span = span(q)
	for i, g := range a.Groups {
		l := g.Intents[0]
		v := groupView{Title: fmt.Sprintf("%d. %s of %s on %s, from %s to %s: %d intents under %d keys",
			i+1, l.Amount, l.Token, l.Chain, l.Payer, l.Merchant, len(g.Intents), g.Keys)}
		for _, l := range g.Intents {
			v.Rows = append(v.Rows, rowOf(q.Owner, l))
		}
		p.Groups = append(p.Groups, v)
	}
	other := q
	other.Window = intentsearch.DefaultWindow
	p.OtherLink = "/intents?" + other.values().Encode()
	s.render(w, http.StatusOK, d)
}

// searchPageOf reads the search r asks for, and returns the page's data
// with its form. Its result ok is false when the search cannot run: the
// store cannot search (501), or the query is bad (400). The refusal has
// then been answered.
func (s *Console) searchPageOf(w http.ResponseWriter, r *http.Request, op operator, duplicates bool) (d pageData, store intentsearch.Store, q intentSearch, ok bool) {
	d = s.pageOf(op)
	d.Search = &searchPage{Duplicates: duplicates, Form: searchForm{Principal: r.FormValue("principal"), Since: r.FormValue("since"),
		Until: r.FormValue("until"), Payer: r.FormValue("payer"), Merchant: r.FormValue("merchant"), Amount: r.FormValue("amount"), Window: r.FormValue("window")}}
	if d.Search.Form.Since == "" {
		d.Search.Form.Since = defaultSince
	}
	d.Principal = d.Search.Form.Principal
	store, ok = s.searchStore()
	if !ok {
		d.Error = errNoSearch.Error()
		s.render(w, http.StatusNotImplemented, d)
		return d, nil, q, false
	}
	q, err := searchQuery(r, s.c.Now())
	if err != nil {
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
		return d, nil, q, false
	}
	return d, store, q, true
}

// span says whose intents q searches, and created when.
func span(q intentSearch) string {
	until := "now"
	if !q.To.IsZero() {
		until = q.To.Format(time.RFC3339)
	}
	return fmt.Sprintf("Principal %s, created from %s to %s", q.Owner, q.From.Format(time.RFC3339), until)
}
