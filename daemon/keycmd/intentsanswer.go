package keycmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intentsearch"
)

// intentsAnswer is what paymentsd intents prints, and what the admin
// socket's route answers. It holds Intents, or with --duplicates Groups.
type intentsAnswer struct {
	Principal  string                   `json:"principal"`
	Since      time.Time                `json:"since"`
	Until      *time.Time               `json:"until,omitempty"`
	Duplicates bool                     `json:"duplicates,omitempty"`
	Intents    []intentsearch.Line      `json:"intents,omitempty"`
	Next       string                   `json:"next,omitempty"` // --after for the next page
	Groups     []intentsearch.GroupLine `json:"groups,omitempty"`
}

// run runs s on store.
func (s intentSearch) run(ctx context.Context, store intentsearch.Store) (*intentsAnswer, error) {
	a := &intentsAnswer{Principal: s.Owner, Since: s.From, Duplicates: s.Duplicates}
	if !s.To.IsZero() {
		a.Until = &s.To
	}
	if s.Duplicates {
		groups, err := intentsearch.Duplicates(ctx, store, s.Query, s.Window)
		for _, g := range groups {
			a.Groups = append(a.Groups, intentsearch.GroupLineOf(g))
		}
		return a, err
	}
	page, next, err := intentsearch.Page(ctx, store, s.Query, s.After, s.Limit)
	for _, f := range page {
		a.Intents = append(a.Intents, intentsearch.LineOf(f))
	}
	a.Next = formatPosition(next)
	return a, err
}

// writeText prints a for a person: an intent a line, newest first.
func (a *intentsAnswer) writeText(w io.Writer) {
	until := "now"
	if a.Until != nil {
		until = a.Until.UTC().Format(time.RFC3339)
	}
	span := fmt.Sprintf("principal %q, created %s to %s", a.Principal, a.Since.UTC().Format(time.RFC3339), until)
	if !a.Duplicates {
		fmt.Fprintf(w, "%s of %s, newest first\n", count(len(a.Intents), "intent"), span)
		for _, l := range a.Intents {
			writeLine(w, l, "")
		}
		if a.Next != "" {
			fmt.Fprintf(w, "more: --after %s\n", a.Next)
		}
		return
	}
	fmt.Fprintf(w, "%s of %s\n", count(len(a.Groups), "suspected double payment"), span)
	for i, g := range a.Groups {
		l := g.Intents[0]
		fmt.Fprintf(w, "%d. %s of %s on %s, from %s to %s: %d intents under %d keys\n",
			i+1, l.Amount, l.Token, l.Chain, l.Payer, l.Merchant, len(g.Intents), g.Keys)
		for _, l := range g.Intents {
			writeLine(w, l, "   ")
		}
	}
}

// count is n of thing: "1 intent", "2 intents".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// writeLine prints l on one line after indent.
func writeLine(w io.Writer, l intentsearch.Line, indent string) {
	key := strconv.Quote(l.Key)
	if l.Key == "" {
		key = "(no key)"
	}
	fmt.Fprintf(w, "%s%s  %s  key %s  %s  %s  from %s to %s\n", indent, l.CreateTime.UTC().Format(time.RFC3339),
		l.ID, key, stateWord(l.State), l.Amount, l.Payer, l.Merchant)
}

// stateWord is a state's enum name without its prefix: CREATED.
func stateWord(s string) string {
	if v, ok := paymentsv1.State_value[s]; ok && v != 0 {
		return s[len("STATE_"):]
	}
	return s
}

// IntentsRoute answers paymentsd intents through the admin socket of the
// server that holds a bbolt file, from store, its intents.
func IntentsRoute(store intentsearch.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := searchOf(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a, err := s.run(r.Context(), store)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a)
	})
}

// searchOf reads a search as values writes it.
func searchOf(v map[string][]string) (intentSearch, error) {
	get := func(name string) string {
		if len(v[name]) != 1 {
			return ""
		}
		return v[name][0]
	}
	s := intentSearch{Duplicates: get("duplicates") == "true"}
	s.Owner, s.Payer, s.Merchant, s.Amount = get("principal"), get("payer"), get("merchant"), get("amount")
	var err error
	if s.From, err = time.Parse(time.RFC3339Nano, get("since")); err != nil {
		return s, fmt.Errorf("since: %w", err)
	}
	if u := get("until"); u != "" {
		if s.To, err = time.Parse(time.RFC3339Nano, u); err != nil {
			return s, fmt.Errorf("until: %w", err)
		}
	}
	if s.Window, err = time.ParseDuration(get("window")); err != nil {
		return s, fmt.Errorf("window: %w", err)
	}
	if s.Limit, err = strconv.Atoi(get("limit")); err != nil {
		return s, fmt.Errorf("limit: %w", err)
	}
	if a := get("after"); a != "" {
		if s.After, err = parsePosition(a); err != nil {
			return s, err
		}
	}
	if s.Owner == "" {
		return s, fmt.Errorf("no principal")
	}
	return s, s.check()
}
