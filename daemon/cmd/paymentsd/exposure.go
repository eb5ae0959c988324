package main

import "net/http"

// metricsAuth requires --metrics-token-file's token of every request to
// next; without the flag it lets all through.
func (m *Main) metricsAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.creds.MetricsAuthorized(r.Header.Values("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "/metrics needs the bearer token of --metrics-token-file", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
