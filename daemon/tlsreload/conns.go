package tlsreload

import (
	"crypto/x509"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// Credentials returns the gRPC server's transport credentials: TLS with
// ALPN h2, as Config(clientAuth, "h2") configures it. Each connection a
// client certificate opens is tracked while it lives. A CRL that revokes
// the certificate then closes it, with every stream on it, such as a
// health Watch that no call check would ever see again.
func (s *Server) Credentials(clientAuth ClientAuth) credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: credentials.NewTLS(s.Config(clientAuth, "h2")), s: s}
}

type serverCreds struct {
	credentials.TransportCredentials
	s *Server
}

// ServerHandshake tracks the connection once its client certificate is
// verified. A CRL loaded during the handshake may have missed it, so the
// chains are checked again once it is tracked.
func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	tlsInfo, ok := info.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.VerifiedChains) == 0 {
		return conn, info, nil
	}
	tc := c.s.conns.add(conn, tlsInfo.State.VerifiedChains)
	if err := refused(c.s.cur.Load().crls, tc.chains, c.s.now()); err != nil {
		tc.Close()
		return nil, nil, err
	}
	return tc, info, nil
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s}
}

// conns are the live connections that client certificates opened.
type conns struct {
	mu   sync.Mutex
	live map[*trackedConn]struct{}
}

// trackedConn is a connection with the chains its handshake verified. It
// leaves its set when closed.
type trackedConn struct {
	net.Conn
	chains [][]*x509.Certificate
	set    *conns
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.live, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}

func (cs *conns) add(conn net.Conn, chains [][]*x509.Certificate) *trackedConn {
	tc := &trackedConn{Conn: conn, chains: chains, set: cs}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.live == nil {
		cs.live = map[*trackedConn]struct{}{}
	}
	cs.live[tc] = struct{}{}
	return tc
}

// closeRefused closes the connections that crls refuse at now.
func (cs *conns) closeRefused(crls *CRLs, now time.Time) {
	if crls == nil {
		return
	}
	var doomed []*trackedConn
	cs.mu.Lock()
	for c := range cs.live {
		if refused(crls, c.chains, now) != nil {
			doomed = append(doomed, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// refused says why crls refuse every one of chains at now, or nil when
// one is still admitted. A call is admitted on one trusted chain too.
func refused(crls *CRLs, chains [][]*x509.Certificate, now time.Time) error {
	var why error
	for _, chain := range chains {
		if why = crls.check(chain, now); why == nil {
			return nil
		}
	}
	return why
}
