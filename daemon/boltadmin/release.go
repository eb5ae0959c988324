package boltadmin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/storage"
)

// refusals name Release's refusals on the admin socket, in its X-Refusal
// header. So the client returns the very sentinel the server's store did.
var refusals = map[string]error{
	"no_record":         storage.ErrNoRecord,
	"in_flight":         storage.ErrReleaseInFlight,
	"success":           storage.ErrReleaseSuccess,
	"not_transactional": storage.ErrReleaseNotTransactional,
	"changed":           storage.ErrReleaseChanged,
}

// RefusalName is the name of err's refusal, or "" when it is none. The
// admin socket and the console answer with that name.
func RefusalName(err error) string {
	for name, sentinel := range refusals {
		if errors.Is(err, sentinel) {
			return name
		}
	}
	return ""
}

// LogRelease logs a release of k by operator and how it ended. Every
// release leaves this line, whoever makes it. The principal is logged by
// its hash (auth.PrincipalHash), as every log names one. The key itself is
// logged, since finding the released key is the line's purpose. The
// caller's extra attributes follow, such as what the operator confirmed.
func LogRelease(ctx context.Context, log *slog.Logger, operator string, k storage.RecordKey, released *storage.Record, err error, extra ...slog.Attr) {
	attrs := append([]slog.Attr{slog.String("operator", operator), slog.String("principal_hash", auth.PrincipalHash(k.Scope)),
		slog.String("key", k.Key)}, extra...)
	switch name := RefusalName(err); {
	case err == nil:
		c := code.Code_OK
		if st := released.Result.Status; st != nil {
			c = code.Code(st.Code)
		}
		attrs = append(attrs, slog.String("outcome", "released"), slog.String("code", c.String()), slog.Uint64("attempt", released.Attempt))
		log.LogAttrs(ctx, slog.LevelWarn, "idempotency key released", attrs...)
	case name != "":
		attrs = append(attrs, slog.String("outcome", "refused"), slog.String("refusal", name))
		log.LogAttrs(ctx, slog.LevelInfo, "idempotency key release refused", attrs...)
	default:
		attrs = append(attrs, slog.String("outcome", "failed"), slog.Any("err", err))
		log.LogAttrs(ctx, slog.LevelError, "idempotency key release failed", attrs...)
	}
}

// release answers POST /release with the released record, in
// storage.Record's binary encoding. A refusal is a 409, with X-Refusal
// naming it. Damaged data is a 422.
func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	k := storage.RecordKey{Scope: r.FormValue("scope"), Key: r.FormValue("key")}
	rec, err := h.db.Release(r.Context(), k, time.Now(), r.FormValue("operator"), storage.Seen{})
	LogRelease(r.Context(), h.log, r.FormValue("operator"), k, rec, err)
	if name := RefusalName(err); name != "" {
		w.Header().Set("X-Refusal", name)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err == nil {
		h.writeRecord(w, rec)
		return
	}
	status := http.StatusInternalServerError
	if errors.Is(err, boltstore.ErrDamaged) {
		status = statusDamaged
	}
	http.Error(w, err.Error(), status)
}

// Release asks the server to release k on operator's behalf. The server
// logs it.
func (c *Client) Release(ctx context.Context, k storage.RecordKey, operator string) (*storage.Record, error) {
	form := url.Values{"scope": {k.Scope}, "key": {k.Key}, "operator": {operator}}
	resp, err := c.do(ctx, http.MethodPost, "/release", strings.NewReader(form.Encode()), http.StatusOK)
	if resp != nil && resp.StatusCode == http.StatusConflict {
		if sentinel := refusals[resp.Header.Get("X-Refusal")]; sentinel != nil {
			return nil, sentinel
		}
	}
	if err != nil {
		return nil, err
	}
	return c.readRecord(resp)
}

// Release releases k in the bbolt data file at path, on operator's behalf
// (see storage.Releaser). When no server holds the file, Release writes to
// it directly and logs to log. Otherwise it asks through the server's
// admin socket, and the server logs it. The result via says which, for the
// operator.
func Release(ctx context.Context, path string, k storage.RecordKey, operator string, log *slog.Logger) (rec *storage.Record, via string, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("no data file at %s: is --db right?", path) // Open would make one
	}
	db, err := boltstore.Open(path, &boltstore.Options{LockTimeout: fileLockWait})
	if err == nil {
		defer db.Close()
		rec, err = db.Release(ctx, k, time.Now(), operator, storage.Seen{})
		LogRelease(ctx, log, operator, k, rec, err)
		return rec, "in the file directly: no server holds it; logged here", err
	}
	if !errors.Is(err, boltstore.ErrLocked) {
		return nil, "", err
	}
	c, err := Dial(path)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	rec, err = c.Release(ctx, k, operator)
	return rec, "through the running server, which logged it", err
}
