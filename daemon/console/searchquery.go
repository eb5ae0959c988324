package console

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// intentSearch is a search of one principal's intents, as the pages
// /intents and /duplicates and their JSON API take it. Its query
// parameters are paymentsd intents' flags of the same names.
type intentSearch struct {
	intentsearch.Query
	Window time.Duration   // of a search for duplicates
	Limit  int             // of a page of intents
	After  server.Position // where a page of intents starts; zero: the newest
}

// Bounds of a search's query.
const (
	defaultSince = "24h"
	// maxWindow is far longer than any client's retries take.
	maxWindow = 24 * time.Hour
	// maxPositionID bounds the id of an after= position.
	maxPositionID = 128
)

// The times a search may name. The stores index an intent by its
// creation time in Unix nanoseconds, which holds these and the window
// before them.
var (
	earliestTime = time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)
	latestTime   = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// searchQuery reads the search r asks for: principal, since (24h when
// absent or empty), until, payer, merchant, amount, window, limit and
// after. now is when a duration before now ends.
func searchQuery(r *http.Request, now time.Time) (intentSearch, error) {
	s := intentSearch{Window: intentsearch.DefaultWindow, Limit: defaultPage}
	s.Owner, s.Payer, s.Merchant, s.Amount = r.FormValue("principal"), r.FormValue("payer"), r.FormValue("merchant"), r.FormValue("amount")
	if err := validPrincipal(s.Owner); err != nil {
		return s, err
	}
	var err error
	if s.From, err = searchTime("since", cmp.Or(r.FormValue("since"), defaultSince), now); err != nil {
		return s, err
	}
	if u := r.FormValue("until"); u != "" {
		if s.To, err = searchTime("until", u, now); err != nil {
			return s, err
		}
		if !s.To.After(s.From) {
			return s, fmt.Errorf("%w: until %q does not come after since", errBadQuery, u)
		}
	}
	if v := r.FormValue("window"); v != "" {
		if s.Window, err = time.ParseDuration(v); err != nil || s.Window <= 0 || s.Window > maxWindow {
			return s, fmt.Errorf("%w: window %q is not a duration from 1ns to %v (10m)", errBadQuery, v, maxWindow)
		}
	}
	if v := r.FormValue("limit"); v != "" {
		if s.Limit, err = strconv.Atoi(v); err != nil || s.Limit < 1 || s.Limit > server.MaxPageSize {
			return s, fmt.Errorf("%w: limit %q is not a number from 1 to %d", errBadQuery, v, server.MaxPageSize)
		}
	}
	if v := r.FormValue("after"); v != "" {
		if s.After, err = parsePosition(v); err != nil {
			return s, err
		}
		if !s.To.IsZero() && !s.After.CreateTime.Before(s.To) {
			return s, fmt.Errorf("%w: after %q is not before until", errBadQuery, v)
		}
	}
	return s, nil
}

// searchTime reads the time that name (since or until) gives, as
// paymentsd intents does: a duration before now, or an RFC 3339 time.
func searchTime(name, v string, now time.Time) (time.Time, error) {
	var t time.Time
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		t = now.Add(-d)
	} else if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q is neither a duration before now (24h) nor an RFC 3339 time", errBadQuery, name, v)
	}
	if !inRange(t) {
		return time.Time{}, fmt.Errorf("%w: %s %q is not a time from 1971 to 2261", errBadQuery, name, v)
	}
	return t.UTC(), nil
}

// inRange reports whether t is a time a search may name.
func inRange(t time.Time) bool { return !t.Before(earliestTime) && t.Before(latestTime) }

// parsePosition reads a position as formatPosition writes it, and as
// paymentsd intents prints it: its time, a slash, its intent's id.
func parsePosition(v string) (server.Position, error) {
	at, id, _ := strings.Cut(v, "/")
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || !inRange(t) || id == "" || len(id) > maxPositionID || !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return server.Position{}, fmt.Errorf("%w: after %q is no position: pass the next page's, as a page or paymentsd intents gives it", errBadQuery, v)
	}
	return server.Position{CreateTime: t.UTC(), ID: id}, nil
}

// formatPosition writes p for after=; "" for the zero Position.
func formatPosition(p server.Position) string {
	if p == (server.Position{}) {
		return ""
	}
	return p.CreateTime.UTC().Format(time.RFC3339Nano) + "/" + p.ID
}

// values is s as a query that searchQuery reads back as s, whenever it
// is read. A relative since is written as the time it named.
func (s intentSearch) values() url.Values {
	v := url.Values{"principal": {s.Owner}, "since": {s.From.UTC().Format(time.RFC3339Nano)}}
	for name, x := range map[string]string{"payer": s.Payer, "merchant": s.Merchant, "amount": s.Amount, "after": formatPosition(s.After)} {
		if x != "" {
			v.Set(name, x)
		}
	}
	if !s.To.IsZero() {
		v.Set("until", s.To.UTC().Format(time.RFC3339Nano))
	}
	if s.Window != intentsearch.DefaultWindow {
		v.Set("window", s.Window.String())
	}
	if s.Limit != defaultPage {
		v.Set("limit", strconv.Itoa(s.Limit))
	}
	return v
}
