package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every listener logs JSON: net/http's own lines on the metrics, console
// and HTTP listeners (a failed TLS handshake here), the gRPC listener's
// refusals, and grpc-go's own lines, which it prints as text by default.
func TestLogs_EveryListenerLogsJSON(t *testing.T) {
	certs := newCertSet(t, "paymentsd log CA")
	env := append(os.Environ(), "GRPC_GO_LOG_SEVERITY_LEVEL=info")
	d := launchEnv(t, env, "--db", filepath.Join(t.TempDir(), "paymentsd.db"), "--listen", "127.0.0.1:0",
		"--http-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-keys", adminKeysFile(t), "--tls-cert", certs.serverCert, "--tls-key", certs.serverKey)
	d.addr = waitListening(t, d)
	addrs := map[string]string{"grpc": d.addr}
	for name, msg := range map[string]string{"http": "http listening", "metrics": "metrics listening", "console": "console listening"} {
		addrs[name] = d.logAddr(t, msg)
	}
	for name, addr := range addrs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // plaintext to TLS
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 512))
		c.Close()
	}
	waitFor(t, 10*time.Second, "a handshake error logged on every listener", func() bool {
		log := d.stderr()
		return strings.Count(log, "TLS handshake error") >= 3 && strings.Contains(log, `"reason":"handshake"`)
	})

	var grpcLines int
	listeners := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(d.stderr()))
	for sc.Scan() {
		var line struct{ Msg, Level, System, Listener string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Msg == "" || line.Level == "" {
			t.Errorf("not a JSON log line: %s", sc.Text())
			continue
		}
		if line.System == "grpc" {
			grpcLines++
		}
		if strings.Contains(line.Msg, "TLS handshake error") {
			listeners[line.Listener] = true
		}
	}
	if grpcLines == 0 {
		t.Error("no grpc-go line logged at GRPC_GO_LOG_SEVERITY_LEVEL=info")
	}
	for _, name := range []string{"metrics", "console"} {
		if !listeners[name] {
			t.Errorf("no TLS handshake error logged for the %s listener", name)
		}
	}
}
