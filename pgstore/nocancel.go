package pgstore

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// refuseCancelRequests makes cfg's connections never cancel a statement.
//
// A commit that waits for a synchronous standby is committed locally
// already. Cancelled, PostgreSQL stops the wait and makes the commit
// visible, though the standby may never get it. A failover then loses it,
// after a retry has read it and been told it was done. pgx sends a
// CancelRequest whenever a statement fails midway, a deadline among the
// causes. So every connection's address is marked. pgx dials that address
// for its cancel connection alone, and the dial is refused. A statement cut
// off by its deadline then only closes its connection. A waiting commit
// waits on, invisible, until a standby confirms it or the server shuts
// down. A statement_timeout would end the wait the same way: ConfigurePool
// sets none.
func refuseCancelRequests(cfg *pgconn.Config) {
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network == noCancelNetwork {
			return nil, errNoCancel
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return noCancelConn{conn}, nil
	}
}

// noCancelNetwork names the network of a marked address. Only a cancel
// connection is dialed at it.
const noCancelNetwork = "paymentsd-no-cancel"

var errNoCancel = errors.New("pgstore: statements are never cancelled: a cancelled wait for a synchronous standby commits locally")

// noCancelConn is a connection whose remote address is marked.
type noCancelConn struct{ net.Conn }

func (c noCancelConn) RemoteAddr() net.Addr { return noCancelAddr{c.Conn.RemoteAddr()} }

// noCancelAddr is a server's address, marked. Its String is the address's
// own, so logs and the suspect hosts (see suspects) name it as it is.
type noCancelAddr struct{ net.Addr }

func (noCancelAddr) Network() string { return noCancelNetwork }

// serverAddr is the address of the server conn reaches, as dialed.
func serverAddr(conn *pgconn.PgConn) string {
	if a, ok := conn.Conn().RemoteAddr().(noCancelAddr); ok {
		return a.Addr.String()
	}
	return conn.Conn().RemoteAddr().String()
}
