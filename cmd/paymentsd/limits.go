package main

import (
	"log"
	"log/slog"
	"net"
	"net/http"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/paymentsd/paymentsd/internal/connlimit"
)

// smallListenerConnections bounds the metrics and console listeners,
// whose clients are a scraper, probes and operators.
const smallListenerConnections = 64

// limits are the bounds on what clients hold, one set per server.
type limits struct {
	listeners map[string]*connlimit.Listener // by name: grpc, http, metrics, console
	refusals  map[string]*connlimit.Refusals
	calls     *connlimit.Calls
}

// limitListeners puts each bound listener behind its connection limit.
// It runs before the store opens, like the binding itself.
func (m *Main) limitListeners() {
	if m.Config.WithoutLimits {
		return
	}
	l := &m.limits
	l.listeners, l.refusals = map[string]*connlimit.Listener{}, map[string]*connlimit.Refusals{}
	limit := func(name string, lis net.Listener, max int) *connlimit.Listener {
		l.refusals[name] = connlimit.NewRefusals(name, m.Logger)
		l.listeners[name] = connlimit.Limit(lis, max, l.refusals[name])
		return l.listeners[name]
	}
	max := m.Config.Limits.MaxConnections
	m.listener = limit("grpc", m.listener, max)
	l.calls = connlimit.NewCalls(m.Config.Limits.MaxCalls, l.listeners["grpc"], l.refusals["grpc"])
	if m.metricsListener != nil {
		m.metricsListener = limit("metrics", m.metricsListener, smallListenerConnections)
	}
	if m.consoleListener != nil {
		m.consoleListener = limit("console", m.consoleListener, smallListenerConnections)
	}
	if m.api != nil {
		m.api.Limit(func(lis net.Listener) net.Listener { return limit("http", lis, max) }, m.connState("http"))
	}
	m.checkFileLimit()
}

// connState is the ConnState hook of the HTTP server on the listener
// named name.
func (m *Main) connState(name string) func(net.Conn, http.ConnState) {
	lis := m.limits.listeners[name]
	if lis == nil {
		return nil
	}
	return lis.ConnState
}

// grpcLimits are the gRPC server's options that bound what a client holds.
func (m *Main) grpcLimits() []grpc.ServerOption {
	if m.Config.WithoutLimits {
		return nil
	}
	c := m.Config.Limits
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(c.MaxStreams),
		grpc.MaxHeaderListSize(c.MaxHeaderBytes),
		grpc.InTapHandle(m.limits.calls.Tap),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: c.KeepaliveNoStream}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     c.MaxConnectionIdle,
			MaxConnectionAge:      c.MaxConnectionAge,
			MaxConnectionAgeGrace: c.MaxConnectionGrace,
			Time:                  c.KeepaliveInterval,
			Timeout:               c.KeepaliveTimeout,
		}),
	}
}

// fileReserve is the file descriptors kept beside the listeners' for the
// data file, the database's connections, logs and the like.
const fileReserve = 256

// checkFileLimit warns when the listeners' limits add up to more file
// descriptors than the process may open: a flood would then reach the
// open-file limit before the connection limit, and every listener would
// fail to accept.
func (m *Main) checkFileLimit() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return
	}
	need := fileReserve + m.Config.DBPool
	for _, lis := range m.limits.listeners {
		need += lis.Max()
	}
	if uint64(need) > rl.Cur {
		m.Logger.Warn("the connection limits exceed the open-file limit: lower --max-connections or raise the limit (ulimit -n, LimitNOFILE=)",
			"open_file_limit", rl.Cur, "needed", need, "max_connections", m.Config.Limits.MaxConnections)
	}
}

// errorLog is the ErrorLog of the HTTP server on the listener named name:
// net/http's lines (a failed TLS handshake, say) as JSON WARN lines.
func (m *Main) errorLog(name string) *log.Logger {
	return slog.NewLogLogger(m.Logger.With("listener", name).Handler(), slog.LevelWarn)
}
