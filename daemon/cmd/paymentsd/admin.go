package main

import (
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/keycmd"
)

// serveAdmin serves the admin socket of m's bbolt file. Through it,
// paymentsd record, intents, backup and check reach the file while it is
// held. It
// returns nil for PostgreSQL, or when the socket cannot be made. That is
// logged, and the server serves payments without it.
func (m *Main) serveAdmin() *boltadmin.Server {
	db, ok := m.db.Records().(*boltstore.DB)
	if !ok {
		return nil
	}
	var routes []boltadmin.Route
	if s, ok := m.db.Intents().(intentsearch.Store); ok {
		routes = append(routes, boltadmin.Route{Pattern: "GET /intents", Handler: keycmd.IntentsRoute(s)})
	}
	a, err := boltadmin.Serve(db, m.Logger, routes...)
	if err != nil {
		m.Logger.Warn("admin socket not served: paymentsd record, backup and check cannot reach this server",
			"path", boltadmin.SocketPath(db.Path()), "err", err)
		return nil
	}
	return a
}
