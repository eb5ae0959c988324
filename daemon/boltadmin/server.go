// Package boltadmin lets an operator's tools read a bbolt data file that a
// running server holds. The server answers on an admin socket beside the
// file. Open gives the tools the same Source whether the file is held or
// not. Backup, Check and Release are the cores of paymentsd backup, check
// and release.
//
// The admin socket is needed because no other process can open a served
// file, not even to read. The server holds bbolt's exclusive lock for as
// long as it runs. The socket is a Unix socket beside the data file, with
// mode 0600. It lies in the directory that boltstore.Open creates with mode
// 0700. Whoever may read the data file may ask it, and nobody else can
// connect. It answers HTTP:
//
//	GET /record?scope=S&key=K  the record, storage.Record's binary encoding; 404 when none, 422 when damaged.
//	GET /backup                a consistent copy of the file, Content-Length bytes.
//	GET /check                 checkAnswer as JSON.
//	POST /release              form scope, key, operator: the released record; 409 with X-Refusal when refused (logged either way).
//
// PostgreSQL needs none: the tools ask the database.
package boltadmin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
)

// SocketPath is the admin socket of the data file at dbPath.
func SocketPath(dbPath string) string { return dbPath + ".admin.sock" }

// Server serves the admin socket of a running boltstore.DB.
type Server struct {
	path string
	srv  *http.Server
	done chan struct{}
}

// Route is a request the admin socket answers beyond its own: one about
// data kept beside the records, such as intents. Pattern is an
// http.ServeMux pattern, "GET /intents".
type Route struct {
	Pattern string
	Handler http.Handler
}

// Serve serves db's admin socket until Close, with routes beside its own.
// Each request is logged to log, or nowhere when log is nil. Its line
// leaves out its scope and key, as it leaves out request metadata. A
// release adds its own line (LogRelease), which names the key and the
// operator.
func Serve(db *boltstore.DB, log *slog.Logger, routes ...Route) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := SocketPath(db.Path())
	lis, err := listen(path)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, done: make(chan struct{})}
	s.srv = &http.Server{Handler: newHandler(db, log, routes), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != http.ErrServerClosed {
			log.Error("serve admin socket", "err", err)
		}
	}()
	log.Info("admin socket listening", "path", path)
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops the admin socket and removes it. After a second, it cuts off
// what is still being answered. A backup in progress must not keep the
// data file from closing. A nil Server, one that was never served, closes
// as nothing.
func (s *Server) Close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
	os.Remove(s.path)
}

// listen listens on a Unix socket at path, with mode 0600. It binds a
// temporary name, restricts it, then renames it into place. So no one can
// connect before the mode is set, whatever the umask. A socket left at path
// by a server that was killed is removed first. The caller holds the data
// file's lock, so no live server can be listening on it.
func listen(path string) (*net.UnixListener, error) {
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
	lis.SetUnlinkOnClose(false) // its name changes; Close removes path itself
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
