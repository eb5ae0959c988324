package boltadmin

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/storage"
)

// statusDamaged is the status of an answer about damaged data. The
// findings are its body.
const statusDamaged = http.StatusUnprocessableEntity

// checkAnswer is the answer of GET /check.
type checkAnswer struct {
	Sound    bool   `json:"sound"`
	Findings string `json:"findings,omitempty"`
	// CannotCommit says why the server cannot commit to the file, when it
	// cannot. A sound file is not all an operator needs to know.
	CannotCommit string `json:"cannot_commit,omitempty"`
}

// writeTimeout bounds each write of an answer. Otherwise a backup whose
// reader stops reading would hold its read transaction for good. That
// transaction also holds every page freed meanwhile.
const writeTimeout = 30 * time.Second

// handler answers the admin socket's requests from db.
type handler struct {
	db  *boltstore.DB
	log *slog.Logger
}

// newHandler returns the admin socket's HTTP handler, with routes beside
// its own. It logs each request without its scope or key. A release adds
// its own line.
func newHandler(db *boltstore.DB, log *slog.Logger, routes []Route) http.Handler {
	h := &handler{db: db, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /record", h.record)
	mux.HandleFunc("GET /backup", h.backup)
	mux.HandleFunc("GET /check", h.check)
	mux.HandleFunc("POST /release", h.release)
	for _, r := range routes {
		mux.Handle(r.Pattern, r.Handler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			log.Info("admin", "path", r.URL.Path, "status", sw.code, "duration_ms", float64(time.Since(start).Microseconds())/1000)
		}()
		mux.ServeHTTP(sw, r)
	})
}

func (h *handler) record(w http.ResponseWriter, r *http.Request) {
	k := storage.RecordKey{Scope: r.FormValue("scope"), Key: r.FormValue("key")}
	rec, err := h.db.Get(r.Context(), k)
	if errors.Is(err, boltstore.ErrDamaged) {
		http.Error(w, err.Error(), statusDamaged)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if rec == nil {
		http.Error(w, "no record", http.StatusNotFound)
		return
	}
	h.writeRecord(w, rec)
}

// writeRecord answers with rec's binary encoding.
func (h *handler) writeRecord(w http.ResponseWriter, rec *storage.Record) {
	b, err := rec.MarshalBinary()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(b)
}

func (h *handler) backup(w http.ResponseWriter, r *http.Request) {
	started := false
	err := h.db.View(r.Context(), func(tx *bolt.Tx) error {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(tx.Size(), 10))
		started = true
		_, err := tx.WriteTo(&deadlineWriter{w: w, rc: http.NewResponseController(w)})
		return err
	})
	switch {
	case err == nil:
	case !started:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		// The reader sees a copy shorter than its Content-Length.
		h.log.Error("admin: backup cut short", "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (h *handler) check(w http.ResponseWriter, _ *http.Request) {
	var answer checkAnswer
	err := h.db.Check()
	switch {
	case err == nil:
		answer.Sound = true
	case errors.Is(err, boltstore.ErrDamaged):
		answer.Findings = err.Error()
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := h.db.Health(); err != nil {
		answer.CannotCommit = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

// deadlineWriter gives each write writeTimeout. It has no ReadFrom, so
// that io.Copy writes through it in chunks.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	return d.w.Write(p)
}

// statusWriter remembers the status code, for the log line.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
