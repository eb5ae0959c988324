package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/wire"
)

// errNoSearch says the intents' store cannot scan a principal's intents.
var errNoSearch = errors.New("this store cannot search a principal's intents: it keeps no index of them by time")

// tooManyText is what a search for duplicates over too many intents
// answers: it reads them all or says nothing.
var tooManyText = fmt.Sprintf("the range holds more than %d intents, more than one search reads: narrow it (a later since, or an until)", intentsearch.MaxScan)

// suspectNote says what a group of duplicates is, and is not.
const suspectNote = "A group is a suspect to check with the customer, not a proof: a customer may mean to pay the same amount twice."

// searchStore is the intents' store as intentsearch reads it, when it can.
func (s *Console) searchStore() (intentsearch.Store, bool) {
	st, ok := s.c.Intents.(intentsearch.Store)
	return st, ok
}

// intentsAnswer is the JSON API's page of a principal's intents. Its
// names are those of paymentsd intents --json.
type intentsAnswer struct {
	Principal string              `json:"principal"`
	Since     time.Time           `json:"since"`
	Until     *time.Time          `json:"until,omitempty"`
	Intents   []intentsearch.Line `json:"intents"`
	// Next is after= of the next page; absent on the last.
	Next string `json:"next,omitempty"`
	// next is where the next page starts: Next, unwritten.
	next server.Position
	// short says the page read intentsearch.MaxScan intents without
	// filling: the next page goes on from where it stopped.
	short bool
}

// duplicatesAnswer is the JSON API's suspected double payments of a
// principal, newest first. Its names are those of paymentsd intents
// --duplicates --json.
type duplicatesAnswer struct {
	Principal string                   `json:"principal"`
	Since     time.Time                `json:"since"`
	Until     *time.Time               `json:"until,omitempty"`
	Window    string                   `json:"window"`
	Groups    []intentsearch.GroupLine `json:"groups"`
	Note      string                   `json:"note"`
}

// until is s's end for an answer: nil for now.
func (s intentSearch) until() *time.Time {
	if s.To.IsZero() {
		return nil
	}
	return &s.To
}

// listIntents reads the page of intents q asks for, for op, logging it.
func (s *Console) listIntents(r *http.Request, op operator, store intentsearch.Store, q intentSearch) (*intentsAnswer, error) {
	page, next, err := intentsearch.Page(r.Context(), store, q.Query, q.After, q.Limit)
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("principal_hash", auth.PrincipalHash(q.Owner)), slog.Int("intents", len(page))}
	if err != nil {
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console intents list failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console intents list", attrs...)
	a := &intentsAnswer{Principal: q.Owner, Since: q.From, Until: q.until(), Intents: make([]intentsearch.Line, 0, len(page)),
		Next: formatPosition(next), next: next, short: len(page) < q.Limit && next != (server.Position{})}
	for _, f := range page {
		a.Intents = append(a.Intents, intentsearch.LineOf(f))
	}
	return a, nil
}

// findDuplicates finds the suspected double payments q asks for, for op,
// logging it. A range of too many intents is intentsearch.ErrTooMany.
func (s *Console) findDuplicates(r *http.Request, op operator, store intentsearch.Store, q intentSearch) (*duplicatesAnswer, error) {
	groups, err := intentsearch.Duplicates(r.Context(), store, q.Query, q.Window)
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("principal_hash", auth.PrincipalHash(q.Owner)), slog.Int("groups", len(groups))}
	switch {
	case errors.Is(err, intentsearch.ErrTooMany):
		s.c.Log.LogAttrs(r.Context(), slog.LevelWarn, "console duplicates search refused: too many intents", attrs...)
		return nil, err
	case err != nil:
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console duplicates search failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console duplicates search", attrs...)
	a := &duplicatesAnswer{Principal: q.Owner, Since: q.From, Until: q.until(), Window: q.Window.String(),
		Groups: make([]intentsearch.GroupLine, 0, len(groups)), Note: suspectNote}
	for _, g := range groups {
		a.Groups = append(a.Groups, intentsearch.GroupLineOf(g))
	}
	return a, nil
}

// apiIntents answers GET /api/v1/intents: a page of a principal's
// intents, newest first, and after= of the next. It answers 400 for a
// bad query and 501 when the store cannot search.
func (s *Console) apiIntents(w http.ResponseWriter, r *http.Request, op operator) {
	store, ok := s.searchStore()
	if !ok {
		writeJSON(w, http.StatusNotImplemented, apiError{Error: errNoSearch.Error()})
		return
	}
	q, err := searchQuery(r, s.c.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	a, err := s.listIntents(r, op, store, q)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the search failed; the server's log says why"})
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// apiDuplicates answers GET /api/v1/duplicates: a principal's suspected
// double payments. It answers 422 for a range of too many intents, 400
// for a bad query and 501 when the store cannot search.
func (s *Console) apiDuplicates(w http.ResponseWriter, r *http.Request, op operator) {
	store, ok := s.searchStore()
	if !ok {
		writeJSON(w, http.StatusNotImplemented, apiError{Error: errNoSearch.Error()})
		return
	}
	q, err := searchQuery(r, s.c.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	a, err := s.findDuplicates(r, op, store, q)
	switch {
	case errors.Is(err, intentsearch.ErrTooMany):
		writeJSON(w, http.StatusUnprocessableEntity, apiError{Error: tooManyText})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the search failed; the server's log says why"})
	default:
		writeJSON(w, http.StatusOK, a)
	}
}

// principalLinks are the pages of principal's intents and duplicates,
// when the store can search; "" otherwise.
func (s *Console) principalLinks(principal string) (intents, duplicates string) {
	if _, ok := s.searchStore(); !ok || principal == "" {
		return "", ""
	}
	q := "?" + url.Values{"principal": {principal}}.Encode()
	return "/intents" + q, "/duplicates" + q
}

// intentRow is an intent in a page's table.
type intentRow struct {
	intentsearch.Line
	Time       string // the creation time, for a person
	StateWord  string // CREATED
	IntentLink string // "" for an id no intent's page takes
	KeyLink    string // "" for no key
}

// rowOf is l of principal as a table's row.
func rowOf(principal string, l intentsearch.Line) intentRow {
	row := intentRow{Line: l, Time: l.CreateTime.UTC().Format(time.RFC3339), StateWord: strings.TrimPrefix(l.State, "STATE_")}
	if server.ValidIntentID(l.ID) {
		row.IntentLink = intentLink(principal, l.ID)
	}
	if l.Key != "" && wire.ValidateKey(l.Key) == nil {
		row.KeyLink = keyLink(principal, l.Key)
	}
	return row
}
