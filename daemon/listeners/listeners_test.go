package listeners_test

import (
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/listeners"
)

// loopbackConfig binds every listener to a free loopback port.
func loopbackConfig() config.Config {
	c := config.Default()
	c.Listen, c.MetricsListen, c.HTTPListen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	return c
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestBind_EveryListenerBehindItsLimit(t *testing.T) {
	s, err := listeners.Bind(loopbackConfig(), discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names []string
	for name := range s.Limits.Listeners {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"console", "grpc", "http", "metrics"}; !slices.Equal(names, want) {
		t.Errorf("limited listeners %v, want %v", names, want)
	}
	if s.Limits.Calls == nil || s.Limits.Refusals["grpc"] == nil {
		t.Error("no call limit on the gRPC listener")
	}
	if s.GRPC != s.Limits.Listeners["grpc"] {
		t.Error("the gRPC listener is not the limited one")
	}
	if srv := s.HTTPServer("console", nil); srv.ConnState == nil || srv.ErrorLog == nil {
		t.Error("the console's server has no ConnState hook or error log")
	}
}

func TestBind_WithoutLimits_NothingLimited(t *testing.T) {
	c := loopbackConfig()
	c.WithoutLimits = true
	s, err := listeners.Bind(c, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Limits.Listeners != nil || s.Limits.Calls != nil {
		t.Errorf("limits %+v without limits", s.Limits)
	}
	if n := len(s.GRPCOptions(nil)); n != 2 {
		t.Errorf("%d gRPC options without limits, want 2 (credentials, handshake timeout)", n)
	}
}

func TestBind_BadAddress_ClosesWhatItBound(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := free.Addr().String()
	free.Close()

	c := loopbackConfig()
	c.Listen, c.MetricsListen = grpcAddr, taken.Addr().String()
	s, err := listeners.Bind(c, discard)
	if err == nil {
		s.Close()
		t.Fatal("Bind took an address in use")
	}
	if !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Errorf("error %q does not name the metrics listener", err)
	}
	again, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("the gRPC address is still bound after the failed Bind: %v", err)
	}
	again.Close()
}
