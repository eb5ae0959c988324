package connlimit

import (
	"net/http"
	"time"
)

// WriteDeadline bounds how long an answer of h may take to be written,
// from its first byte: a client that does not read it within d has its
// connection closed (HTTP/1.1) or its stream reset (HTTP/2). Then what
// the answer held is let go. The clock starts at the first write, not
// with the request, so that a handler's own time is not counted.
func WriteDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, d: d}, r)
	})
}

type deadlineWriter struct {
	http.ResponseWriter
	d     time.Duration
	armed bool
}

func (w *deadlineWriter) arm() {
	if !w.armed {
		w.armed = true
		// An error means the writer cannot be given a deadline; then the
		// server's own timeouts are all there is.
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
