package console

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// maxHolders bounds the principals a lookup by key alone lists. A key
// held by more is a common one, such as "1": the list says so.
const maxHolders = 100

// holder is a principal holding a key, for the list of a lookup by key
// alone.
type holder struct {
	Principal string `json:"principal"`
	State     string `json:"state"`
	Link      string `json:"-"` // the key page
}

// holders is the answer to a lookup by key alone. The JSON names are for
// scripts.
type holders struct {
	Key        string   `json:"key"`
	Principals []holder `json:"principals"`
	// More says more principals hold the key than are listed.
	More bool `json:"more"`
}

// findHolders finds the principals holding key, for op, logging it.
func (s *Console) findHolders(r *http.Request, op operator, key string) (*holders, error) {
	finder, ok := s.c.Store.(storage.KeyFinder)
	if !ok {
		return nil, errNoKeyFinder
	}
	found, err := finder.FindKey(r.Context(), key, maxHolders+1)
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("key", key), slog.Int("principals", min(len(found), maxHolders))}
	if err != nil {
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console key lookup failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console key lookup", attrs...)
	h := &holders{Key: key, Principals: []holder{}, More: len(found) > maxHolders}
	now := s.c.Now()
	for _, kr := range found[:min(len(found), maxHolders)] {
		v := recordview.New(kr.Key, kr.Record, now)
		h.Principals = append(h.Principals, holder{Principal: kr.Key.Scope, State: v.State, Link: keyLink(kr.Key.Scope, kr.Key.Key)})
	}
	return h, nil
}

// errNoKeyFinder says the store cannot find a key under every principal.
var errNoKeyFinder = fmt.Errorf("%w: this store cannot look a key up without its principal", errBadQuery)

// keyQuery reads the key r asks for, alone.
func keyQuery(r *http.Request) (string, error) {
	key := r.FormValue("key")
	if err := wire.ValidateKey(key); err != nil {
		return key, fmt.Errorf("%w: key %q is no idempotency key: %v", errBadQuery, key, err)
	}
	return key, nil
}

// apiKeys answers GET /api/v1/keys?key=K: the principals holding K.
func (s *Console) apiKeys(w http.ResponseWriter, r *http.Request, op operator) {
	key, err := keyQuery(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	h, err := s.findHolders(r, op, key)
	switch {
	case err == errNoKeyFinder:
		writeJSON(w, http.StatusNotImplemented, apiError{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the lookup failed; the server's log says why"})
	default:
		writeJSON(w, http.StatusOK, h)
	}
}

// search answers the lookup form of GET / without a principal. Its key
// is an intent id or an idempotency key. An intent found leads to its
// page. A key held by one principal leads to its key page; one held by
// several lists them.
func (s *Console) search(w http.ResponseWriter, r *http.Request, op operator) {
	d := s.pageOf(op)
	key := r.FormValue("key")
	d.Key = key
	if _, ok := s.c.Intents.(IntentFinder); ok && server.ValidIntentID(key) {
		a, err := s.findIntent(r, op, "", key)
		if err != nil {
			d.Error = "the lookup failed; the server's log says why"
			s.render(w, http.StatusInternalServerError, d)
			return
		}
		if a.Found {
			http.Redirect(w, r, intentLink(a.Principal, key), http.StatusSeeOther)
			return
		}
	}
	if _, err := keyQuery(r); err != nil {
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
		return
	}
	h, err := s.findHolders(r, op, key)
	switch {
	case err == errNoKeyFinder:
		d.Error = "this store cannot look a key up without its principal: give the principal too"
		s.render(w, http.StatusBadRequest, d)
		return
	case err != nil:
		d.Error = "the lookup failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	switch len(h.Principals) {
	case 0:
		d.Error = fmt.Sprintf("no principal holds key %q in a stored record: never used, expired and swept, or released (look it up with its principal to see its releases). "+
			"A transactional claim in flight is not stored until it commits: see In flight.", key)
		if server.ValidIntentID(key) {
			d.Error = fmt.Sprintf("no principal holds key %q, and no intent has that id", key)
		}
		s.render(w, http.StatusNotFound, d)
	case 1:
		http.Redirect(w, r, h.Principals[0].Link, http.StatusSeeOther)
	default:
		d.Holders = h
		s.render(w, http.StatusOK, d)
	}
}
