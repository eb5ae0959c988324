package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/boltstore"
)

// The admin socket lets paymentsd record, backup and check reach a running
// server's bbolt file, which no other process can open, not even to read:
// the server holds bbolt's exclusive lock for as long as it runs. It is a
// Unix socket beside the data file, mode 0600, in a directory paymentsd
// creates 0700: whoever may read the data file may ask it, nobody else can
// connect. It answers HTTP:
//
//	GET /record?scope=S&key=K  the record, storage.Record's binary encoding; 404 when none, 422 when damaged
//	GET /backup                a consistent copy of the file, Content-Length bytes
//	GET /check                 adminCheck as JSON
//
// PostgreSQL needs none: the subcommands ask the database.
func adminSocketPath(dbPath string) string { return dbPath + ".admin.sock" }

// adminDamaged is the status of an answer about damaged data: the
// findings are its body.
const adminDamaged = http.StatusUnprocessableEntity

// adminCheck is the answer of GET /check.
type adminCheck struct {
	Sound    bool   `json:"sound"`
	Findings string `json:"findings,omitempty"`
	// CannotCommit says why the server cannot commit to the file, when it
	// cannot: a sound file is not all an operator needs to know.
	CannotCommit string `json:"cannot_commit,omitempty"`
}

// adminWriteTimeout bounds each write of an answer: a backup whose reader
// stops reading would otherwise hold its read transaction, and with it
// every page freed meanwhile, for good.
const adminWriteTimeout = 30 * time.Second

// adminServer serves the admin socket.
type adminServer struct {
	path string
	srv  *http.Server
	done chan struct{}
}

// serveAdmin serves the admin socket of m's bbolt file. It returns nil for
// PostgreSQL, or when the socket cannot be made: that is logged, and the
// server serves payments without it.
func (m *Main) serveAdmin() *adminServer {
	db, ok := m.db.Records().(*boltstore.DB)
	if !ok {
		return nil
	}
	path := adminSocketPath(db.Path())
	lis, err := listenAdmin(path)
	if err != nil {
		m.Logger.Warn("admin socket not served: paymentsd record, backup and check cannot reach this server", "path", path, "err", err)
		return nil
	}
	a := &adminServer{path: path, done: make(chan struct{})}
	a.srv = &http.Server{Handler: adminHandler(db, m.Logger), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(lis); err != http.ErrServerClosed {
			m.Logger.Error("serve admin socket", "err", err)
		}
	}()
	m.Logger.Info("admin socket listening", "path", path)
	return a
}

// close stops the admin socket and removes it, cutting off what is still
// being answered after a second: a backup in progress must not keep the
// data file from closing.
func (a *adminServer) close() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		a.srv.Close()
	}
	<-a.done
	os.Remove(a.path)
}

// listenAdmin listens on a Unix socket at path, mode 0600. It binds a
// temporary name, restricts it, then renames it into place, so that no one
// can connect before the mode is set, whatever the umask. A socket left at
// path by a server that was killed is removed first: this process holds
// the data file's lock, so no live server can be listening on it.
func listenAdmin(path string) (*net.UnixListener, error) {
	if info, err := os.Lstat(path); err == nil {
		if info.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket: move it away", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".paymentsd-admin-%d.sock", os.Getpid()))
	os.Remove(tmp) // left by a killed process that had this pid
	addr, done, err := shortSocketPath(tmp)
	if err != nil {
		return nil, err
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	done()
	if err != nil {
		return nil, err
	}
	lis.SetUnlinkOnClose(false) // its name changes; close removes path itself
	if err = os.Chmod(tmp, 0o600); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		lis.Close()
		os.Remove(tmp)
		return nil, err
	}
	return lis, nil
}

// adminHandler answers the admin socket's requests from db. Each is logged
// without its scope or key, which, like request metadata, never reach a log.
func adminHandler(db *boltstore.DB, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /record", func(w http.ResponseWriter, r *http.Request) {
		k := storage.RecordKey{Scope: r.FormValue("scope"), Key: r.FormValue("key")}
		rec, err := db.Get(r.Context(), k)
		if errors.Is(err, boltstore.ErrDamaged) {
			http.Error(w, err.Error(), adminDamaged)
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
		b, err := rec.MarshalBinary()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	})
	mux.HandleFunc("GET /backup", func(w http.ResponseWriter, r *http.Request) {
		started := false
		err := db.View(r.Context(), func(tx *bolt.Tx) error {
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
			log.Error("admin: backup cut short", "err", err)
			panic(http.ErrAbortHandler)
		}
	})
	mux.HandleFunc("GET /check", func(w http.ResponseWriter, r *http.Request) {
		var answer adminCheck
		err := db.Check()
		switch {
		case err == nil:
			answer.Sound = true
		case errors.Is(err, boltstore.ErrDamaged):
			answer.Findings = err.Error()
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := db.Health(); err != nil {
			answer.CannotCommit = err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(answer)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			log.Info("admin", "path", r.URL.Path, "status", sw.code, "duration_ms", float64(time.Since(start).Microseconds())/1000)
		}()
		mux.ServeHTTP(sw, r)
	})
}

// deadlineWriter gives each write adminWriteTimeout. It has no ReadFrom,
// so that io.Copy writes through it in chunks.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(adminWriteTimeout))
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
