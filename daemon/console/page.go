package console

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
)

//go:embed page.html
var templates embed.FS

// pageTemplate is the one page; html/template escapes every value in it.
var pageTemplate = template.Must(template.ParseFS(templates, "page.html"))

// pageData is what the page shows.
type pageData struct {
	Login    bool   // the login form, for a request without a credential
	Operator string // who is logged in
	CSRF     string // the session's form token; empty for bearer requests
	Error    string
	// Principal and Key are the lookup asked for.
	Principal, Key string
	Lookup         *lookup
	// KeyView is the key page of the record looked up. ReleasedKey is
	// the page of a key with no record but releases.
	KeyView     *keyPage
	ReleasedKey *releasedKey
	// Holders lists the principals holding a key looked up alone.
	Holders *holders
	// Confirm asks to confirm the release of what it names.
	Confirm  *confirmation
	Released *recordview.View
	Refusal  string
	// KeyLink is the key page of Principal and Key, once they are valid.
	KeyLink string
	// InFlight asks for the table of keys in flight, Claims. NextPage is
	// the URL of its next page, if any.
	InFlight bool
	Claims   []claimRow
	NextPage string
	// IntentView is an intent's lookup. IntentKey is the key that created
	// it, and IntentKeyLink that key's page, when the store says.
	IntentView    *intentAnswer
	IntentKey     string
	IntentKeyLink string
	// Search is the page of a principal's intents or duplicates.
	// Searchable says the store can search them: the lookup page offers
	// it. IntentsLink and DuplicatesLink are those pages of Principal,
	// from its key's or intent's page.
	Search                      *searchPage
	Searchable                  bool
	IntentsLink, DuplicatesLink string
}

// page answers GET /: the lookup form, and the lookup asked for when the
// query names one. A principal and key lead to the key page. A key alone,
// or an intent id, is searched for (see search).
func (s *Console) page(w http.ResponseWriter, r *http.Request, op operator) {
	switch {
	case r.FormValue("principal") == "" && r.FormValue("key") == "":
		s.render(w, http.StatusOK, s.pageOf(op))
	case r.FormValue("principal") == "":
		s.search(w, r, op)
	default:
		if _, k, ok := s.pageKey(w, r, op); ok {
			http.Redirect(w, r, keyLink(k.Scope, k.Key), http.StatusSeeOther)
		}
	}
}

// confirmation is what a release would delete, shown for the operator
// to confirm. Its form carries what they saw (confirmed), which the
// release checks.
type confirmation struct {
	Principal, Key string
	Code, Message  string // the stored error's
	confirmed
	Began string // the claim time, for a person
}

// pageConfirmRelease answers the page's release button, GET
// /release?principal=P&key=K. It shows what the release would delete and
// a form to confirm it. It changes nothing. When the rules refuse the
// release, it shows why instead, with 409.
func (s *Console) pageConfirmRelease(w http.ResponseWriter, r *http.Request, op operator) {
	d, k, ok := s.pageKey(w, r, op)
	if !ok {
		return
	}
	cur, err := s.current(r.Context(), k)
	if err != nil {
		s.c.Log.ErrorContext(r.Context(), "console release confirmation failed", "operator", op.name, "err", err)
		d.Error = "the lookup failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
		return
	}
	rec := cur.rec
	if err := s.checkRelease(cur); err != nil {
		d.Refusal, _ = s.refusalText(r, op, k, err)
		s.render(w, http.StatusConflict, d)
		return
	}
	st := rec.Result.Status // CheckRelease allows a stored error alone
	c := &confirmation{Principal: k.Scope, Key: k.Key, Code: code.Code(st.Code).String(), Message: st.Message, confirmed: confirmedOf(rec), Began: "unknown"}
	if !rec.ClaimTime.IsZero() {
		c.Began = rec.ClaimTime.UTC().Format(time.RFC3339) + " (" + timeLeft(rec.ClaimTime, s.c.Now()) + ")"
	}
	d.Confirm = c
	s.render(w, http.StatusOK, d)
}

// pageRelease answers the confirmation's form, POST /release. It shows
// the record released, or the refusal saying why not. The form must carry
// the attempt confirmed: one without it is not the confirmation's.
func (s *Console) pageRelease(w http.ResponseWriter, r *http.Request, op operator) {
	d, k, ok := s.pageKey(w, r, op)
	if !ok {
		return
	}
	if r.PostFormValue("attempt") == "" {
		d.Error = "the release names no attempt confirmed: open the key's confirmation page and release from there"
		s.render(w, http.StatusBadRequest, d)
		return
	}
	rec, err := s.release(r, op, k)
	why, refused := s.refusalText(r, op, k, err)
	switch {
	case refused:
		d.Refusal = why
		s.render(w, http.StatusConflict, d)
	case errors.Is(err, errBadQuery):
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
	case err != nil:
		d.Error = "the release failed; the server's log says why"
		s.render(w, http.StatusInternalServerError, d)
	default:
		d.Released = recordview.New(k, rec, s.c.Now())
		s.render(w, http.StatusOK, d)
	}
}

// pageKey reads the principal and key r asks for. It returns the page's
// data with them. Its result ok is false when they name none. The refusal
// has then been answered.
func (s *Console) pageKey(w http.ResponseWriter, r *http.Request, op operator) (d pageData, k storage.RecordKey, ok bool) {
	d = s.pageOf(op)
	k, err := recordKey(r)
	d.Principal, d.Key = k.Scope, k.Key
	if err != nil {
		d.Error = err.Error()
		s.render(w, http.StatusBadRequest, d)
		return d, k, false
	}
	d.KeyLink = keyLink(k.Scope, k.Key)
	d.IntentsLink, d.DuplicatesLink = s.principalLinks(k.Scope)
	return d, k, true
}

// pageOf is the page's data for op, before any lookup.
func (s *Console) pageOf(op operator) pageData {
	d := pageData{Operator: op.name}
	_, d.Searchable = s.searchStore()
	if op.session != nil {
		d.CSRF = op.session.csrf
	}
	return d
}

// render answers the page of d with status. The page is rendered in full
// before anything is sent. So a template error is a 500, not half a page.
func (s *Console) render(w http.ResponseWriter, status int, d pageData) {
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, d); err != nil {
		s.c.Log.Error("console page", "err", err)
		http.Error(w, "the page failed; the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}
