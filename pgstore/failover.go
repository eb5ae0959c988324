package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// defaultConnectTimeout bounds each host's part of a new connection when
// the connection string sets no connect_timeout. A host that says nothing
// (a primary hung, cut off or gone, whose packets vanish) would otherwise
// hold every new connection until its caller gives up, and the next host
// of a multi-host URL, a promoted standby, would never be tried: no
// failover. Well under pgintents' 10 s probe, so that a probe reaches the
// second host.
const defaultConnectTimeout = 3 * time.Second

// boundConnect gives cfg the default connect timeout if it has none.
func boundConnect(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
}

// dropConnections ends the pool's connections and the notice listener's
// after a failed probe. A server that went silent never closes them, and
// every statement sent on one waits for its caller's deadline: without
// this, a probe, a call, and the listener would keep finding the old
// primary for as long as connections to it lasted, after a standby was
// promoted in its place. New connections go to whichever host accepts
// writes. An embedder's pool (New) is the embedder's to reset: only the
// listener, which is this store's, is ended then.
func (db *DB) dropConnections() {
	if db.ownsPool {
		db.pool.Reset()
	}
	db.watcher.reconnect()
}
