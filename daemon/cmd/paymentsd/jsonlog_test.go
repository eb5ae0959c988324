package main

import (
	"net"
	"os"
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
	d := start(t, spec{env: env, http: true, metrics: true, tls: certs,
		args: []string{"--admin-listen", "127.0.0.1:0", "--admin-keys", adminKeysFile(t)}})
	addrs := map[string]string{"grpc": d.addr, "http": d.httpAddr, "metrics": d.metricsAddr(t), "console": d.logAddr(t, "console listening")}
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
	for _, text := range d.notJSON() {
		t.Errorf("not a JSON log line: %s", text)
	}
	for _, line := range d.lines("") {
		if line.str("msg") == "" || line.str("level") == "" {
			t.Errorf("not a JSON log line: %v", line)
			continue
		}
		if line["system"] == "grpc" {
			grpcLines++
		}
		if strings.Contains(line.str("msg"), "TLS handshake error") {
			listeners[line.str("listener")] = true
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
