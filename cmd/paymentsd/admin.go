package main

import (
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
)

// serveAdmin serves the admin socket of m's bbolt file. Through it,
// paymentsd record, backup and check reach the file while it is held. It
// returns nil for PostgreSQL, or when the socket cannot be made. That is
// logged, and the server serves payments without it.
func (m *Main) serveAdmin() *boltadmin.Server {
	db, ok := m.db.Records().(*boltstore.DB)
	if !ok {
		return nil
	}
	a, err := boltadmin.Serve(db, m.Logger)
	if err != nil {
		m.Logger.Warn("admin socket not served: paymentsd record, backup and check cannot reach this server",
			"path", boltadmin.SocketPath(db.Path()), "err", err)
		return nil
	}
	return a
}
