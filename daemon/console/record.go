package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// lookup is the answer to a lookup: the record's view, or why there is
// none. The JSON names are for scripts.
type lookup struct {
	Found  bool             `json:"found"`
	Record *recordview.View `json:"record"`
	// Response is the stored response decoded as protojson: what the
	// key's retries are answered.
	Response json.RawMessage `json:"response"`
	// Details are the stored error's details, decoded; null for a
	// response.
	Details []detail `json:"details"`
	// Header and Trailer are the metadata the handler set, stored with
	// its answer.
	Header  map[string][]string `json:"header"`
	Trailer map[string][]string `json:"trailer"`
	// Releases are the key's releases, oldest first; null when the store
	// keeps none (storage.ReleaseHistory).
	Releases []releaseEntry `json:"releases"`
	// IntentPath is the HTTP API's path of the intent the record names.
	// It is for a GET with the customer's own credential.
	IntentPath *string `json:"intent_path"`
	Message    string  `json:"message,omitempty"`
	// Stored is false for a claim this process holds in memory alone, not
	// yet in the store: a transactional one not yet committed.
	Stored bool `json:"stored"`
	// Released says the key holds no record because it was released:
	// Releases say when and by whom. Its next request runs afresh.
	Released bool `json:"released"`
	// NextRequest says in words what the key's next request gets.
	NextRequest string `json:"next_request"`
	// releasable says storage.CheckRelease allows the record's release
	// now. The page shows its release button only then.
	releasable bool
	// cur is what the key holds, as the console judged it.
	cur current
}

// apiError is the JSON API's error body.
type apiError struct {
	Error string `json:"error"`
}

// errBadQuery is a principal or key that names none.
var errBadQuery = errors.New("bad query")

// recordKey reads the principal and key of r's query or form, as
// paymentsd record takes them. A customer's token is never asked for.
func recordKey(r *http.Request) (storage.RecordKey, error) {
	return validKey(r.FormValue("principal"), r.FormValue("key"))
}

// validKey is the record key of principal p and key, or an error saying
// why they name none.
func validKey(p, key string) (storage.RecordKey, error) {
	k := storage.RecordKey{Scope: p, Key: key}
	if err := validPrincipal(p); err != nil {
		return k, err
	}
	if err := wire.ValidateKey(k.Key); err != nil {
		return k, fmt.Errorf("%w: key %q is no idempotency key: %v", errBadQuery, k.Key, err)
	}
	return k, nil
}

// validPrincipal says why p names no principal, or returns nil.
func validPrincipal(p string) error {
	if !auth.ValidPrincipal(p) && !auth.ValidDevPrincipal(p) && !auth.ValidCertPrincipal(p) {
		return fmt.Errorf(`%w: principal %q names no principal: one is as listed in --api-keys, or "dev:" and a token's SHA-256 in dev mode, or a client certificate's (spiffe://... or dns:<name>)`, errBadQuery, p)
	}
	return nil
}

// find looks k up for op, logging it, and returns what the page and the
// API show. A key with no record is still known by the claim this process
// holds of it, or by its releases.
func (s *Console) find(r *http.Request, op operator, k storage.RecordKey) (*lookup, error) {
	cur, err := s.current(r.Context(), k)
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("principal_hash", auth.PrincipalHash(k.Scope)),
		slog.String("key", k.Key), slog.Bool("found", cur.rec != nil)}
	if err != nil {
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console lookup failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console lookup", attrs...)
	releases, err := s.releases(r, op, k)
	if err != nil {
		return nil, err
	}
	if cur.rec == nil {
		return s.noRecord(k, releases), nil
	}
	l := s.view(k, cur)
	l.Releases = releases
	return l, nil
}

// noRecord is the lookup of k, which holds no record and no claim here.
// A key with releases is known: it was released, and runs afresh.
func (s *Console) noRecord(k storage.RecordKey, releases []releaseEntry) *lookup {
	l := &lookup{Releases: releases, NextRequest: "The next request with the key runs afresh: no record of it is stored." + s.unseen()}
	if len(releases) == 0 {
		l.Message = fmt.Sprintf("no record of key %q for principal %q, no claim of it in flight here, and no release of it kept: never used, or expired and swept.", k.Key, k.Scope) + s.unseen()
		return l
	}
	last := releases[len(releases)-1]
	l.Released = true
	l.Message = fmt.Sprintf("key %q of principal %q holds no record: it was released at %s by %s, and no record of it is stored since.",
		k.Key, k.Scope, last.Time.Format(time.RFC3339), last.Operator)
	return l
}

// releases are the releases of k, or nil when the store keeps none.
func (s *Console) releases(r *http.Request, op operator, k storage.RecordKey) ([]releaseEntry, error) {
	h, ok := s.c.Store.(storage.ReleaseHistory)
	if !ok {
		return nil, nil
	}
	entries, err := h.Releases(r.Context(), k)
	if err != nil {
		s.c.Log.ErrorContext(r.Context(), "console release history failed", "operator", op.name, "key", k.Key, "err", err)
		return nil, err
	}
	out := make([]releaseEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, releaseEntry{Time: e.Time.UTC(), Operator: e.By, Attempt: e.Attempt, Code: code.Code(e.Code).String(), Message: e.Message})
	}
	return out, nil
}

// view is what is shown of c, what k holds.
func (s *Console) view(k storage.RecordKey, c current) *lookup {
	now := s.c.Now()
	rec := c.rec
	l := &lookup{Found: true, Record: recordview.New(k, rec, now), Stored: c.stored, cur: c, releasable: s.checkRelease(c) == nil}
	l.NextRequest = s.nextRequest(l.Record, c, now)
	if res := rec.Result; res != nil {
		if res.Response != nil {
			l.Response, _ = indentedJSON(res.Response) // none shown when it does not marshal
		}
		if res.Status != nil {
			l.Details = decodeDetails(res.Status.Details)
		}
		l.Header, l.Trailer = res.Header, res.Trailer
	}
	if id := l.Record.IntentID; id != nil {
		path := "/v1/payment_intents/" + *id
		l.IntentPath = &path
	}
	return l
}

// nextRequest says what the next request with the key of c, viewed as v,
// gets.
func (s *Console) nextRequest(v *recordview.View, c current, now time.Time) string {
	switch {
	case v.Completed && v.State == recordview.StateExpired:
		return "The record expired: the next request runs afresh."
	case v.Completed:
		return "A retry is answered with the stored answer; another request with the key is refused as its reuse."
	}
	return s.retryOutlook(c, now).full
}

// release releases k for op, logging it as every release is logged. When
// r confirms an attempt and claim time, the store releases the record
// only if it still matches them.
func (s *Console) release(r *http.Request, op operator, k storage.RecordKey) (*storage.Record, error) {
	seen, err := confirmedQuery(r)
	if err != nil {
		return nil, err
	}
	rec, err := s.releaseUnlessInFlight(r.Context(), op, k, seen)
	var confirmed []slog.Attr
	if seen != (storage.Seen{}) {
		confirmed = []slog.Attr{slog.Uint64("confirmed_attempt", seen.Attempt), slog.Time("confirmed_claim_time", seen.ClaimTime)}
	}
	boltadmin.LogRelease(r.Context(), s.c.Log, op.name, k, rec, err, confirmed...)
	return rec, err
}

// releaseUnlessInFlight releases k, but refuses a key in flight itself. A
// claim this process holds in memory has no stored record, yet it is in
// flight. And the store's own check would wait for the claim's commit:
// bbolt's write waits for the group commit, PostgreSQL's for the key's
// lock.
func (s *Console) releaseUnlessInFlight(ctx context.Context, op operator, k storage.RecordKey, seen storage.Seen) (*storage.Record, error) {
	cur, err := s.current(ctx, k)
	if err != nil {
		return nil, err
	}
	if errors.Is(s.checkRelease(cur), storage.ErrReleaseInFlight) {
		return nil, storage.ErrReleaseInFlight
	}
	return s.c.Store.Release(ctx, k, s.c.Now(), op.name, seen)
}

// checkRelease is storage.CheckRelease of what c holds, now. A claim this
// process holds is in flight however late its expiry: a retry is told so
// (storage.Decide).
func (s *Console) checkRelease(c current) error {
	if c.rec != nil && !c.stored {
		return storage.ErrReleaseInFlight
	}
	return storage.CheckRelease(c.rec, s.c.Now())
}

// refusalText says why err, a refusal of k's release, keeps the record.
// A key with no live record that the console knows, released or expired,
// is not said to be perhaps never used.
func (s *Console) refusalText(r *http.Request, op operator, k storage.RecordKey, err error) (string, bool) {
	why, ok := recordview.RefusalText(err)
	if !errors.Is(err, storage.ErrNoRecord) {
		return why, ok
	}
	if cur, err := s.current(r.Context(), k); err == nil && cur.rec != nil && !s.c.Now().Before(cur.rec.Expiry) {
		return "the key's record expired at " + cur.rec.Expiry.UTC().Format(time.RFC3339) + ": nothing to release; its next request runs afresh", true
	}
	if releases, err := s.releases(r, op, k); err == nil && len(releases) > 0 {
		last := releases[len(releases)-1]
		return "the key was released at " + last.Time.Format(time.RFC3339) + " by " + last.Operator +
			" and holds no record since: nothing to release; its next request runs afresh", true
	}
	return why, ok
}

// apiRecord answers GET /api/v1/record?principal=P&key=K with the record,
// or with the claim this process holds of it. A key with neither but with
// releases is answered 200 too, with released true. It answers 404 for a
// key it knows nothing of, and 400 for a principal or key that names none.
func (s *Console) apiRecord(w http.ResponseWriter, r *http.Request, op operator) {
	k, err := recordKey(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	l, err := s.find(r, op, k)
	switch {
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the lookup failed; the server's log says why"})
	case !l.Found && !l.Released:
		writeJSON(w, http.StatusNotFound, l)
	default:
		writeJSON(w, http.StatusOK, l)
	}
}

// releaseAnswer is the JSON API's answer to a release.
type releaseAnswer struct {
	Released bool             `json:"released"`
	Record   *recordview.View `json:"record,omitempty"` // the record released
	Refusal  string           `json:"refusal,omitempty"`
	Message  string           `json:"message,omitempty"`
}

// apiRelease answers POST /api/v1/release, with principal and key in the
// form or query, and optionally the attempt and claim_time the caller saw.
// It answers 200 with the record released, or 409 naming the refusal.
func (s *Console) apiRelease(w http.ResponseWriter, r *http.Request, op operator) {
	k, err := recordKey(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	rec, err := s.release(r, op, k)
	if why, ok := s.refusalText(r, op, k, err); ok {
		writeJSON(w, http.StatusConflict, releaseAnswer{Refusal: boltadmin.RefusalName(err), Message: why})
		return
	}
	switch {
	case errors.Is(err, errBadQuery):
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the release failed; the server's log says why"})
	default:
		writeJSON(w, http.StatusOK, releaseAnswer{Released: true, Record: recordview.New(k, rec, s.c.Now())})
	}
}

// isAPI reports whether r is for the JSON API rather than the page.
func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
