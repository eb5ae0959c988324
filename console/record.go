package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/wire"
	"github.com/paymentsd/paymentsd/recordview"
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
	// releasable says storage.CheckRelease allows the record's release
	// now. The page shows its release button only then.
	releasable bool
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
// API show.
func (s *Console) find(r *http.Request, op operator, k storage.RecordKey) (*lookup, error) {
	rec, err := s.c.Store.Get(r.Context(), k)
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("principal_hash", auth.PrincipalHash(k.Scope)),
		slog.String("key", k.Key), slog.Bool("found", rec != nil)}
	if err != nil {
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console lookup failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console lookup", attrs...)
	if rec == nil {
		return &lookup{Message: fmt.Sprintf("no record of key %q for principal %q: never used, or expired and swept", k.Key, k.Scope)}, nil
	}
	l := s.view(k, rec)
	if l.Releases, err = s.releases(r, op, k); err != nil {
		return nil, err
	}
	return l, nil
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

// view is what is shown of rec, stored for k.
func (s *Console) view(k storage.RecordKey, rec *storage.Record) *lookup {
	now := s.c.Now()
	l := &lookup{Found: true, Record: recordview.New(k, rec, now), releasable: storage.CheckRelease(rec, now) == nil}
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

// release releases k for op, logging it as every release is logged. When
// r confirms an attempt and claim time, the store releases the record
// only if it still matches them.
func (s *Console) release(r *http.Request, op operator, k storage.RecordKey) (*storage.Record, error) {
	seen, err := confirmedQuery(r)
	if err != nil {
		return nil, err
	}
	rec, err := s.c.Store.Release(r.Context(), k, s.c.Now(), op.name, seen)
	var confirmed []slog.Attr
	if seen != (storage.Seen{}) {
		confirmed = []slog.Attr{slog.Uint64("confirmed_attempt", seen.Attempt), slog.Time("confirmed_claim_time", seen.ClaimTime)}
	}
	boltadmin.LogRelease(r.Context(), s.c.Log, op.name, k, rec, err, confirmed...)
	return rec, err
}

// apiRecord answers GET /api/v1/record?principal=P&key=K with the record.
// It answers 404 when there is none. It answers 400 for a principal or key
// that names none.
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
	case !l.Found:
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
	if why, ok := recordview.RefusalText(err); ok {
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
