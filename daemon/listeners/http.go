package listeners

import (
	"log"
	"log/slog"
	"net/http"
	"time"

	"github.com/paymentsd/paymentsd/daemon/internal/connlimit"
)

// HTTPServer is the server of the metrics or console listener, named
// name. It bounds header blocks, idle connections and how long an answer
// takes to write. Its connections are counted, and net/http's lines (a
// failed TLS handshake, say) logged as JSON WARN lines.
func (s *Set) HTTPServer(name string, h http.Handler) *http.Server {
	if !s.config.WithoutLimits {
		h = connlimit.WriteDeadline(h, s.config.Limits.WriteTimeout)
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ConnState: s.connState(name), ErrorLog: s.errorLog(name)}
}

// errorLog is the ErrorLog of the HTTP server on the listener named name.
func (s *Set) errorLog(name string) *log.Logger {
	return slog.NewLogLogger(s.logger.With("listener", name).Handler(), slog.LevelWarn)
}
