// Package backend names what paymentsd keeps its data in. That is the
// idempotency records and the payment intents, in one database. So an
// intent and its record commit together. boltintents and pgintents each
// open one.
//
// It is a package of its own for two reasons. It is not part of server,
// because server knows nothing of idempotency keys. That package must not
// import the interceptor's store contract. It is not part of an intent
// package, because the daemon names it without knowing which of the two it
// runs on. Both intent packages import it, and it imports neither, so there
// is no cycle.
package intents

import (
	"context"
	"log/slog"

	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/storage"
)

// Records is what the daemon needs of an idempotency store. That is the
// interceptor's TxStore and the store's upkeep: sweeping, a record read for
// the operator, counting for the metrics. It adds the operator's release of
// a key and the list of claims in flight, which the console offers.
type Records interface {
	storage.TxStore
	storage.Upkeep
	storage.Releaser
	storage.InFlightLister
}

// Backend is where paymentsd keeps its data.
type Backend interface {
	// Records are the idempotency records, under the interceptor.
	Records() Records
	// Intents are the payment intents, written through Records' units of
	// work.
	Intents() server.IntentStore
	// String names the database for the log, never with a password.
	String() string
	// Check reports the database's health, probing it when that is how to
	// know. It is nil while the database serves.
	Check(ctx context.Context) error
	// CountRecords counts the idempotency records stored, for the metrics.
	CountRecords() (float64, error)
	// ClosedAttrs are logged when the daemon closes it.
	ClosedAttrs() []slog.Attr
	// Close closes the database.
	Close() error
}
