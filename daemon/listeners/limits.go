package listeners

import (
	"net"
	"net/http"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/daemon/internal/connlimit"
)

// smallListenerConnections bounds the metrics and console listeners,
// whose clients are a scraper, probes and operators.
const smallListenerConnections = 64

// limit puts each bound listener behind its connection limit.
func (s *Set) limit() {
	if s.config.WithoutLimits {
		return
	}
	l := &s.Limits
	l.Listeners, l.Refusals = map[string]*connlimit.Listener{}, map[string]*connlimit.Refusals{}
	limit := func(name string, lis net.Listener, max int) *connlimit.Listener {
		l.Refusals[name] = connlimit.NewRefusals(name, s.logger)
		l.Listeners[name] = connlimit.Limit(lis, max, l.Refusals[name])
		return l.Listeners[name]
	}
	max := s.config.Limits.MaxConnections
	s.GRPC = limit("grpc", s.GRPC, max)
	c := s.config.Limits
	unread := connlimit.Unread{PerConnection: c.MaxUnreadPerConn, Grace: c.UnreadGrace, Total: c.MaxUnread}
	l.Calls = connlimit.NewCalls(c.MaxCalls, unread, l.Listeners["grpc"], l.Refusals["grpc"])
	if s.Metrics != nil {
		s.Metrics = limit("metrics", s.Metrics, smallListenerConnections)
	}
	if s.Console != nil {
		s.Console = limit("console", s.Console, smallListenerConnections)
	}
	if s.API != nil {
		// The hook reads the listener when a connection changes state,
		// after Limit has made it.
		var limited *connlimit.Listener
		s.API.Limit(func(lis net.Listener) net.Listener { limited = limit("http", lis, max); return limited },
			func(c net.Conn, state http.ConnState) { limited.ConnState(c, state) }, c.WriteTimeout)
	}
	s.checkFileLimit()
}

// connState is the ConnState hook of the HTTP server on the listener
// named name.
func (s *Set) connState(name string) func(net.Conn, http.ConnState) {
	lis := s.Limits.Listeners[name]
	if lis == nil {
		return nil
	}
	return lis.ConnState
}

// handshakeTimeout bounds a new gRPC connection's handshake (TLS and the
// HTTP/2 preface), as ReadHeaderTimeout bounds the HTTP face's. A client
// that connects and says nothing holds nothing for long.
const handshakeTimeout = 10 * time.Second

// GRPCOptions are the gRPC server's options that bound what a client
// holds, and its transport credentials. Those are network's (nil for
// plaintext), with the HTTP face's in-memory connection let in either way.
// Failed handshakes are counted, and header blocks timed.
func (s *Set) GRPCOptions(network credentials.TransportCredentials) []grpc.ServerOption {
	creds := httpapi.ServerCredentials(network)
	if !s.config.WithoutLimits {
		creds = connlimit.Credentials(creds, s.config.Limits.HeaderTimeout, s.Limits.Calls, s.Limits.Refusals["grpc"])
	}
	return append(s.grpcLimits(), grpc.Creds(creds), grpc.ConnectionTimeout(handshakeTimeout))
}

// grpcLimits are the gRPC server's options that bound what a client holds.
func (s *Set) grpcLimits() []grpc.ServerOption {
	if s.config.WithoutLimits {
		return nil
	}
	c := s.config.Limits
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(c.MaxStreams),
		grpc.MaxHeaderListSize(c.MaxHeaderBytes),
		grpc.InTapHandle(s.Limits.Calls.Tap),
		grpc.StatsHandler(s.Limits.Calls.StatsHandler()),
		// Frames are read straight from the connection, which buffers
		// them itself: Calls learns which stream each call is from the
		// last frame read (connlimit.Credentials).
		grpc.ReadBufferSize(0),
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

// fileReserve is the file descriptors kept beside the listeners'. They
// serve the data file, the database's connections, logs and the like.
const fileReserve = 256

// checkFileLimit warns when the listeners' limits add up to more file
// descriptors than the process may open. A flood would then reach the
// open-file limit before the connection limit, and every listener would
// fail to accept.
func (s *Set) checkFileLimit() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return
	}
	need := fileReserve + s.config.DBPool
	for _, lis := range s.Limits.Listeners {
		need += lis.Max()
	}
	if uint64(need) > rl.Cur {
		s.logger.Warn("the connection limits exceed the open-file limit: lower --max-connections or raise the limit (ulimit -n, LimitNOFILE=)",
			"open_file_limit", rl.Cur, "needed", need, "max_connections", s.config.Limits.MaxConnections)
	}
}
