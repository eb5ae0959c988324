// Package listeners binds paymentsd's addresses and bounds what clients
// hold on each. It binds before the store opens, so a bad address leaves
// no data file behind.
package listeners

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/daemon/internal/connlimit"
)

// Set is paymentsd's bound listeners, each behind its connection limit.
type Set struct {
	GRPC    net.Listener
	Metrics net.Listener  // nil without --metrics-listen
	Console net.Listener  // nil without --admin-listen
	API     *httpapi.Face // the HTTP/JSON API; nil without --http-listen
	Limits  Limits        // all nil with Config.WithoutLimits

	config config.Config
	logger *slog.Logger
}

// Limits are the bounds on what clients hold, one set per server.
type Limits struct {
	Listeners map[string]*connlimit.Listener // by name: grpc, http, metrics, console
	Refusals  map[string]*connlimit.Refusals
	Calls     *connlimit.Calls
}

// Bind binds the gRPC, metrics, HTTP and console addresses of c. It puts
// each behind its connection limit, and logs to logger what the limits
// refuse. On an error it closes what it bound.
func Bind(c config.Config, logger *slog.Logger) (*Set, error) {
	s := &Set{config: c, logger: logger}
	if err := s.bind(); err != nil {
		s.Close()
		return nil, err
	}
	s.limit()
	return s, nil
}

// bind binds the addresses that s.config lists.
func (s *Set) bind() (err error) {
	c := s.config
	if s.GRPC, err = net.Listen("tcp", c.Listen); err != nil {
		return err
	}
	if c.MetricsListen != "" {
		if s.Metrics, err = net.Listen("tcp", c.MetricsListen); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if c.HTTPListen != "" {
		if s.API, err = httpapi.Listen(c.HTTPListen); err != nil {
			return err
		}
	}
	if c.AdminListen != "" {
		if s.Console, err = net.Listen("tcp", c.AdminListen); err != nil {
			return fmt.Errorf("admin console: %w", err)
		}
	}
	return nil
}

// Close closes the listeners of a server that never started.
func (s *Set) Close() {
	for _, lis := range []net.Listener{s.GRPC, s.Metrics, s.Console} {
		if lis != nil {
			lis.Close()
		}
	}
	if s.API != nil {
		s.API.Close()
	}
}
