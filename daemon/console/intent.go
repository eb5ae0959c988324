package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// Intents is what the console reads of the payment intents: one, by its
// owner and id. A server.IntentStore is one.
type Intents interface {
	GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error)
}

// IntentFinder is Intents that can also find an intent by its id alone,
// whoever owns it, with the key that created it. Ids are unique across
// owners. boltintents' and pgintents' stores are ones.
type IntentFinder interface {
	FindIntent(ctx context.Context, id string) (server.FoundIntent, error)
}

// intentAnswer is the JSON API's answer to an intent's lookup.
type intentAnswer struct {
	Found bool `json:"found"`
	// Principal owns the intent. It is set when the lookup named none.
	Principal string `json:"principal,omitempty"`
	// Key is the idempotency key that created the intent, when the store
	// can tell: "" for one created without a key or stored before keys
	// were kept.
	Key     *string         `json:"key,omitempty"`
	Intent  json.RawMessage `json:"intent,omitempty"` // as the gRPC and HTTP APIs show it
	Message string          `json:"message,omitempty"`
}

// intentQuery reads the principal and intent id r asks for. With
// anyOwner, the principal may be absent: the intent is then looked up by
// its id alone.
func intentQuery(r *http.Request, anyOwner bool) (principal, id string, err error) {
	principal, id = r.FormValue("principal"), r.FormValue("id")
	if err := validPrincipal(principal); err != nil && !(anyOwner && !r.Form.Has("principal")) {
		return principal, id, err
	}
	if !server.ValidIntentID(id) {
		return principal, id, fmt.Errorf("%w: id %q is no intent's: one is pi_ and 24 lowercase hex digits", errBadQuery, id)
	}
	return principal, id, nil
}

// intentLink is the page's URL of the intent id of principal.
func intentLink(principal, id string) string {
	return "/intent?" + url.Values{"principal": {principal}, "id": {id}}.Encode()
}

// findIntent reads the intent r asks for, for op, logging it. An empty
// principal looks the id up whoever owns it; the answer then names the
// owner.
func (s *Console) findIntent(r *http.Request, op operator, principal, id string) (*intentAnswer, error) {
	var (
		pi    *paymentsv1.PaymentIntent
		err   error
		owner = principal
		key   *string
	)
	if finder, ok := s.c.Intents.(IntentFinder); ok {
		var found server.FoundIntent
		if found, err = finder.FindIntent(r.Context(), id); err == nil && principal != "" && found.Owner != principal {
			err = server.ErrNotFound // another owner's intent is as absent as a missing one
		}
		owner, pi, key = found.Owner, found.Intent, &found.Key
	} else {
		pi, err = s.c.Intents.GetIntent(r.Context(), principal, id)
	}
	attrs := []slog.Attr{slog.String("operator", op.name), slog.String("intent_id", id), slog.Bool("found", err == nil)}
	if err == nil || principal != "" {
		attrs = append(attrs, slog.String("principal_hash", auth.PrincipalHash(owner)))
	}
	switch {
	case errors.Is(err, server.ErrNotFound) && principal == "":
		s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console intent lookup", attrs...)
		return &intentAnswer{Message: fmt.Sprintf("no principal has an intent %s", id)}, nil
	case errors.Is(err, server.ErrNotFound):
		s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console intent lookup", attrs...)
		return &intentAnswer{Message: fmt.Sprintf("principal %q has no intent %s", principal, id)}, nil
	case err != nil:
		s.c.Log.LogAttrs(r.Context(), slog.LevelError, "console intent lookup failed", append(attrs, slog.Any("err", err))...)
		return nil, err
	}
	s.c.Log.LogAttrs(r.Context(), slog.LevelInfo, "console intent lookup", attrs...)
	intent, err := indentedJSON(pi)
	if err != nil {
		return nil, err
	}
	a := &intentAnswer{Found: true, Key: key, Intent: intent}
	if principal == "" {
		a.Principal = owner
	}
	return a, nil
}

// apiIntent answers GET /api/v1/intent?principal=P&id=ID with the intent.
// It answers 404 when the principal has none of that id. It answers 400
// for a principal or id that names none. Without principal, it finds the
// intent whoever owns it, and names the owner, when the store can
// (IntentFinder).
func (s *Console) apiIntent(w http.ResponseWriter, r *http.Request, op operator) {
	_, anyOwner := s.c.Intents.(IntentFinder)
	principal, id, err := intentQuery(r, anyOwner)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	a, err := s.findIntent(r, op, principal, id)
	switch {
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the lookup failed; the server's log says why"})
	case !a.Found:
		writeJSON(w, http.StatusNotFound, a)
	default:
		writeJSON(w, http.StatusOK, a)
	}
}

// pageIntent answers GET /intent?principal=P&id=ID: the intent as the
// APIs show it.
func (s *Console) pageIntent(w http.ResponseWriter, r *http.Request, op operator) {
	d := s.pageOf(op)
	principal, id, err := intentQuery(r, false)
	d.Principal = principal
	if err != nil {
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
		return
	}
	a, err := s.findIntent(r, op, principal, id)
	if err != nil {
		d.Error = "the lookup failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	d.IntentView = a
	d.IntentsLink, d.DuplicatesLink = s.principalLinks(principal)
	if a.Key != nil && *a.Key != "" {
		d.IntentKey, d.IntentKeyLink = *a.Key, keyLink(principal, *a.Key)
	}
	status := http.StatusOK
	if !a.Found {
		status = http.StatusNotFound
	}
	s.render(w, status, d)
}
