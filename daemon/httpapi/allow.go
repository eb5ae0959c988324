package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// probeMethods are the methods a route may take, in the order Allow lists
// them.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// probeKey marks a request that only asks the mux whether a route takes
// it. Its value is a *bool, which the route sets when it is found.
type probeKey struct{}

// probe is the mux's middleware that answers such a request. It sets the
// request's flag instead of calling the API. So Allow is what the mux
// routes, not a list kept beside it.
func probe(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if found, ok := r.Context().Value(probeKey{}).(*bool); ok {
			*found = true
			return
		}
		next(w, r, params)
	}
}

// isProbe reports whether r is such a request.
func isProbe(r *http.Request) bool {
	_, ok := r.Context().Value(probeKey{}).(*bool)
	return ok
}

// allowed is the value of Allow for r's path: the methods mux routes
// there. It tries each method with a probe that has no body or headers.
func allowed(mux *runtime.ServeMux, r *http.Request) string {
	var methods []string
	for _, m := range probeMethods {
		found := false
		p := r.Clone(context.WithValue(r.Context(), probeKey{}, &found))
		p.Method, p.Header, p.Body, p.ContentLength = m, http.Header{}, http.NoBody, 0
		mux.ServeHTTP(discard{}, p)
		if found {
			methods = append(methods, m)
		}
	}
	return strings.Join(methods, ", ")
}

// discard is a ResponseWriter that keeps nothing: a probe's answer.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
