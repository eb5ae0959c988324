package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestZapToSlog_EntriesBecomeTheLoggersLines: the etcd client's zap
// entries come out as the daemon's JSON lines, fields as attributes,
// below the logger's level not at all.
func TestZapToSlog_EntriesBecomeTheLoggersLines(t *testing.T) {
	var buf bytes.Buffer
	log := zapToSlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	log.Debug("hidden")
	log.With(zap.String("target", "etcd")).Warn("retrying", zap.Int("attempt", 2), zap.Error(errors.New("boom")))
	log.Error("failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (warn, error):\n%s", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	want := map[string]any{"level": "WARN", "msg": "retrying", "component": "etcd-client",
		"target": "etcd", "attempt": float64(2), "error": "boom"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v, in %s", k, got[k], v, lines[0])
		}
	}
	if !strings.Contains(lines[1], `"level":"ERROR"`) {
		t.Errorf("the error line: %s", lines[1])
	}
}
