package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// defaultConnectTimeout bounds each host's part of a new connection when
// the connection string sets no connect_timeout. Take a host that says
// nothing: a primary hung, cut off or gone, whose packets vanish. It would
// otherwise hold every new connection until its caller gives up. The next
// host of a multi-host URL, a promoted standby, would never be tried: no
// failover. It is well under pgintents' 10 s probe, so that a probe reaches
// the second host.
const defaultConnectTimeout = 3 * time.Second

// boundConnect gives cfg the default connect timeout if it has none.
func boundConnect(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
}

// dropConnections ends the pool's connections and the notice listener's
// after a failed probe. A server that went silent never closes them. Every
// statement sent on one waits for its caller's deadline. Without this, a
// probe, a call and the listener would keep finding the old primary. They
// would do so for as long as its connections lasted, after a standby was
// promoted in its place. New connections go to whichever host accepts
// writes. An embedder's pool (New) is the embedder's to reset. Then only
// the listener, which is this store's, is ended.
func (db *DB) dropConnections() {
	if db.ownsPool {
		db.pool.Reset()
	}
	db.watcher.reconnect()
}
