package credfiles

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"

	"github.com/paymentsd/paymentsd/internal/bearer"
	"github.com/paymentsd/paymentsd/internal/safefile"
)

// loadMetricsToken reads the token /metrics requires; only its SHA-256 is
// kept, as for the API keys.
func loadMetricsToken(path string) (*[sha256.Size]byte, error) {
	data, err := safefile.ReadPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("--metrics-token-file: %w", err)
	}
	token, err := bearer.ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("--metrics-token-file %s: %w", path, err)
	}
	sum := sha256.Sum256([]byte(token))
	return &sum, nil
}

// MetricsAuthorized reports whether a request to /metrics carries the
// token of Config.MetricsToken in its authorization values. It is true
// when no token is required.
func (cr *Credentials) MetricsAuthorized(authorization []string) bool {
	want := cr.metricsToken.Load()
	if want == nil {
		return true
	}
	token, err := bearer.Parse(authorization)
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// reloadMetricsToken reads the metrics token again. When the file does
// not load, the previous token stays in use.
func (cr *Credentials) reloadMetricsToken(why string, reloaded func(string, error)) {
	cr.reloading.Lock()
	defer cr.reloading.Unlock()
	sum, err := loadMetricsToken(cr.config.MetricsToken)
	reloaded("metrics_token", err)
	if err != nil {
		cr.logger.Error("metrics token not reloaded: the previous token stays in use", "trigger", why, "err", err)
		return
	}
	cr.metricsToken.Store(sum)
	cr.logger.Info("metrics token reloaded", "trigger", why, "file", cr.config.MetricsToken)
}
