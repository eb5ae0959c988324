package grpcslog_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/internal/grpcslog"
)

func TestLogger_SeverityAndJSON(t *testing.T) {
	for _, c := range []struct {
		env       string
		wantLines int // of an info, a warning and an error
	}{{"", 1}, {"error", 1}, {"warning", 2}, {"INFO", 3}} {
		t.Setenv("GRPC_GO_LOG_SEVERITY_LEVEL", c.env)
		var buf bytes.Buffer
		l := grpcslog.New(slog.New(slog.NewJSONHandler(&buf, nil)))
		l.Infof("info %d", 1)
		l.Warningln("warning", 2)
		l.Error("error ", 3)
		lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
		if buf.Len() == 0 {
			lines = nil
		}
		if len(lines) != c.wantLines {
			t.Errorf("severity %q: %d lines, want %d:\n%s", c.env, len(lines), c.wantLines, buf.String())
		}
		for _, line := range lines {
			var v struct{ Level, Msg, System string }
			if err := json.Unmarshal(line, &v); err != nil || v.System != "grpc" || v.Msg == "" || v.Msg[len(v.Msg)-1] == '\n' {
				t.Errorf("severity %q: line %s: %+v, %v", c.env, line, v, err)
			}
		}
	}
}

func TestLogger_Verbosity(t *testing.T) {
	t.Setenv("GRPC_GO_LOG_VERBOSITY_LEVEL", "2")
	l := grpcslog.New(slog.New(slog.DiscardHandler))
	if !l.V(2) || l.V(3) {
		t.Errorf("V(2) %v, V(3) %v; want true, false", l.V(2), l.V(3))
	}
}
