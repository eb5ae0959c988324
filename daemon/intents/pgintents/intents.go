// Package pgintents keeps paymentsd's payment intents in a table of their
// own, in the PostgreSQL database of a pgstore.DB. Inside a handler under
// the idempotency interceptor, its statements join the transaction that
// completes the request's record. So intent and answer commit together, or
// neither does.
package pgintents

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/pgstore"
)

// component names the intents' schema in pgstore's schema_versions.
const component = "payment_intents"

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a server.IntentStore in a pgstore.DB.
type Store struct {
	db *pgstore.DB
}

var _ server.IntentStore = (*Store)(nil)

// New returns the intents kept in db, bringing their table up to date
// first. It uses pgstore.Migrate, which migrates once however many
// processes start together.
func New(ctx context.Context, db *pgstore.DB) (*Store, error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("intents: %w", err)
	}
	if err := pgstore.Migrate(ctx, db.Pool(), component, sub); err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// NewReader returns the intents kept in db as they are, never migrated:
// for an operator's command, which must not change the schema under the
// servers.
func NewReader(db *pgstore.DB) *Store { return &Store{db: db} }

// CreateIntent stores a new intent owned by owner, created under key. It
// returns
// server.ErrExists if the id is taken, by any owner. The insert does
// nothing on a taken id rather than fail, so that the PostgreSQL
// transaction stays usable. The ErrExists still fails the unit of work, as
// a taken id fails a boltstore.Tx. So inside a request's pgstore.Tx, the
// commit then stores neither the handler's writes nor its answer.
func (s *Store) CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error {
	v, err := encodeIntent(pi)
	if err != nil {
		return err
	}
	return s.db.Run(ctx, func(q pgstore.Querier) error {
		if err := s.writeHere(ctx, q, owner); err != nil {
			return err
		}
		tag, err := q.Exec(ctx, `INSERT INTO payment_intents (id, owner, create_time_ns, intent, idempotency_key)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
			pi.Id, owner, createNanos(pi), v, nullString(key))
		if err != nil {
			return fmt.Errorf("create intent %s: %w", pi.Id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("create intent %s: %w", pi.Id, server.ErrExists)
		}
		return nil
	})
}

// GetIntent returns owner's intent id, or server.ErrNotFound when there is
// none. Another owner's intent is as absent as a missing one.
func (s *Store) GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error) {
	var pi *paymentsv1.PaymentIntent
	err := s.db.Read(ctx, func(q pgstore.Querier) (err error) {
		if pi, err = getIntent(ctx, q, owner, id, false); err != nil {
			return err // a miss is pi == nil: an answer, not a failure of the storage
		}
		return s.readHere(ctx, q, owner)
	})
	if err == nil && pi == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return pi, err
}

// FindIntent returns intent id with its owner, whoever that is, and the
// key that created it; or server.ErrNotFound. Ids are unique across
// owners. It is for operators, who look an intent up by its id alone.
func (s *Store) FindIntent(ctx context.Context, id string) (server.FoundIntent, error) {
	var found server.FoundIntent
	err := s.db.Read(ctx, func(q pgstore.Querier) error {
		var (
			raw []byte
			key *string
		)
		switch err := q.QueryRow(ctx, `SELECT owner, idempotency_key, intent FROM payment_intents WHERE id = $1`, id).Scan(&found.Owner, &key, &raw); {
		case errors.Is(err, pgx.ErrNoRows):
			return nil // a miss is no intent: an answer, not a failure of the storage
		case err != nil:
			return fmt.Errorf("intent %s: %w", id, err)
		}
		if key != nil {
			found.Key = *key
		}
		var err error
		found.Intent, err = decodeIntent(id, raw)
		return err
	})
	if err == nil && found.Intent == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return found, err
}

// nullString is s for a nullable column: NULL when empty.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// UpdateIntent applies update to owner's intent id and stores it if update
// reports a change. It does so in one transaction that locks the row first:
// the request's, inside a pgstore.Tx. Concurrent updates queue on the lock,
// and each sees the one before it. So update runs once per call. It runs
// inside that transaction, so it must not call the store. Like boltintents,
// UpdateIntent returns the intent as update left it.
//
// Outside a pgstore.Tx, a wait for the row's lock may outlast the
// database's lock_timeout (pgstore's LockTimeout). It is then tried again,
// as long as ctx lives: nothing was read, so update has not run. Inside a
// Tx the timed-out statement has failed the transaction, and its error is
// returned.
func (s *Store) UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error) {
	for {
		var (
			pi   *paymentsv1.PaymentIntent
			busy bool // fn ran, and timed out waiting for the row's lock
		)
		err := s.db.Run(ctx, func(q pgstore.Querier) error {
			if err := s.writeHere(ctx, q, owner); err != nil {
				return err
			}
			var err error
			pi, err = getIntent(ctx, q, owner, id, true)
			if err != nil {
				busy = isLockTimeout(err)
				return err
			}
			if pi == nil || !update(pi) {
				return nil
			}
			v, err := encodeIntent(pi)
			if err != nil {
				return err
			}
			if _, err := q.Exec(ctx, `UPDATE payment_intents SET intent = $2 WHERE id = $1`, id, v); err != nil {
				return fmt.Errorf("update intent %s: %w", id, err)
			}
			return nil
		})
		switch {
		case busy && ctx.Err() == nil:
			// Again. Inside a Tx, which the timeout failed, Run does
			// not call fn again: it returns the Tx's failure.
			continue
		case err != nil:
			return nil, err
		case pi == nil:
			return nil, fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
		}
		return pi, nil
	}
}

// ListIntents returns up to limit of owner's intents in creation order,
// starting after the cursor after (nil for the first page). It also returns
// the cursor of the next page, nil when there is none. A cursor is opaque:
// the creation time and id of the page's last intent, as boltintents
// encodes them. One that names no intent still lists from where it would
// sort. A page is one keyset scan of the (owner, create_time_ns, id) index.
// Its cost does not grow with the pages before it.
func (s *Store) ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error) {
	if limit <= 0 {
		return nil, nil, fmt.Errorf("list intents: limit %d, want at least 1", limit)
	}
	var (
		afterNanos int64
		afterID    string
	)
	if len(after) > 0 {
		var err error
		if afterNanos, afterID, err = decodeCursor(after); err != nil {
			return nil, nil, fmt.Errorf("list intents: %w", err)
		}
	}
	// One row more than the page tells whether another page follows.
	fetch := min(int64(limit), math.MaxInt64-1) + 1
	var (
		page []*paymentsv1.PaymentIntent
		next []byte
	)
	err := s.db.Read(ctx, func(q pgstore.Querier) error {
		var (
			rows pgx.Rows
			err  error
		)
		if len(after) == 0 {
			rows, err = q.Query(ctx, listFirst, owner, fetch)
		} else {
			rows, err = q.Query(ctx, listAfter, owner, afterNanos, afterID, fetch)
		}
		if err != nil {
			return fmt.Errorf("list intents: %w", err)
		}
		if page, next, err = scanPage(rows, limit); err != nil {
			return err
		}
		return s.readHere(ctx, q, owner)
	})
	if err != nil {
		return nil, nil, err
	}
	return page, next, nil
}

// scanPage reads and closes rows, those of a page query, which asks for one
// row more than limit. It returns the page's intents and the cursor of the
// next page. The cursor is nil when the extra row is not there: no page
// follows. The extra row is only counted, never decoded.
func scanPage(rows pgx.Rows, limit int) (page []*paymentsv1.PaymentIntent, next []byte, err error) {
	defer rows.Close()
	var lastNanos int64
	for rows.Next() {
		if len(page) == limit {
			next = encodeCursor(lastNanos, page[len(page)-1].Id)
			break
		}
		var (
			nanos int64
			id    string
			raw   []byte
		)
		if err := rows.Scan(&nanos, &id, &raw); err != nil {
			return nil, nil, fmt.Errorf("list intents: %w", err)
		}
		pi, err := decodeIntent(id, raw)
		if err != nil {
			return nil, nil, err
		}
		page, lastNanos = append(page, pi), nanos
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list intents: %w", err)
	}
	return page, next, nil
}

// The queries of a page: the first, and those after a cursor. The row
// comparison is what lets the index scan start at the cursor.
const (
	listFirst = `SELECT create_time_ns, id, intent FROM payment_intents
		WHERE owner = $1
		ORDER BY create_time_ns, id LIMIT $2`
	listAfter = `SELECT create_time_ns, id, intent FROM payment_intents
		WHERE owner = $1 AND (create_time_ns, id) > ($2, $3)
		ORDER BY create_time_ns, id LIMIT $4`
)

// getIntent returns owner's intent id, nil when there is none. With lock,
// the row stays locked until the transaction ends.
func getIntent(ctx context.Context, q pgstore.Querier, owner, id string, lock bool) (*paymentsv1.PaymentIntent, error) {
	query := `SELECT intent FROM payment_intents WHERE id = $1 AND owner = $2`
	if lock {
		query += ` FOR UPDATE`
	}
	var raw []byte
	err := q.QueryRow(ctx, query, id, owner).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("intent %s: %w", id, err)
	}
	return decodeIntent(id, raw)
}

// createNanos is the paging order's first key. It is fixed at creation:
// an update never moves an intent in its owner's list.
func createNanos(pi *paymentsv1.PaymentIntent) int64 {
	return pi.GetCreateTime().AsTime().UnixNano()
}

// encodeIntent is the stored form of pi: its deterministic encoding. Equal
// intents are then equal bytes.
func encodeIntent(pi *paymentsv1.PaymentIntent) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
	if err != nil {
		return nil, fmt.Errorf("encode intent %s: %w", pi.Id, err)
	}
	return b, nil
}

func decodeIntent(id string, raw []byte) (*paymentsv1.PaymentIntent, error) {
	pi := new(paymentsv1.PaymentIntent)
	if err := proto.Unmarshal(raw, pi); err != nil {
		return nil, fmt.Errorf("intent %s: %w", id, err)
	}
	return pi, nil
}

// A cursor is boltintents': the creation time in nanoseconds, 8 bytes big
// endian, then the id.
const cursorTimeSize = 8

func encodeCursor(createNanos int64, id string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(createNanos)), id...)
}

// decodeCursor checks a cursor, which reaches the store from a caller's
// page token. It refuses, rather than sends, one too short for its time. It
// also refuses one whose id could not be text in PostgreSQL: not UTF-8, or
// with a NUL.
func decodeCursor(c []byte) (createNanos int64, id string, err error) {
	if len(c) < cursorTimeSize {
		return 0, "", fmt.Errorf("malformed cursor: %d bytes, want at least %d", len(c), cursorTimeSize)
	}
	id = string(c[cursorTimeSize:])
	if !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return 0, "", errors.New("malformed cursor: its id is not UTF-8 text without NUL")
	}
	return int64(binary.BigEndian.Uint64(c)), id, nil
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

var _ server.IntentScanner = (*Store)(nil)

// scanIntents reads an owner's intents from $2 on, before ($3, $4), newest
// first: a backward scan of the paging index.
const scanIntents = `SELECT id, coalesce(idempotency_key, ''), intent FROM payment_intents
	WHERE owner = $1 AND create_time_ns >= $2 AND (create_time_ns, id) < ($3, $4)
	ORDER BY create_time_ns DESC, id DESC`

// ScanIntents streams owner's intents, newest first, in one query, and
// proves what it read as any read is (pgstore.DB.Read).
func (s *Store) ScanIntents(ctx context.Context, owner string, from time.Time, before server.Position, fn func(server.FoundIntent) (bool, error)) error {
	fromNanos, beforeNanos, beforeID := int64(math.MinInt64), int64(math.MaxInt64), ""
	if !from.IsZero() {
		fromNanos = from.UnixNano()
	}
	if before != (server.Position{}) {
		beforeNanos, beforeID = before.CreateTime.UnixNano(), before.ID
	}
	return s.db.Read(ctx, func(q pgstore.Querier) error {
		rows, err := q.Query(ctx, scanIntents, owner, fromNanos, beforeNanos, beforeID)
		if err != nil {
			return fmt.Errorf("scan intents: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			// The row's own bytes, valid until the next: the decoded
			// intent copies what it keeps.
			v := rows.RawValues()
			if len(v) != 3 || v[0] == nil || v[2] == nil {
				return fmt.Errorf("scan intents: a row of %d columns, or a null id or intent", len(v))
			}
			id, key := string(v[0]), string(v[1])
			pi, err := decodeIntent(id, v[2])
			if err != nil {
				return err
			}
			if more, err := fn(server.FoundIntent{Owner: owner, Key: key, Intent: pi}); err != nil || !more {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return s.readHere(ctx, q, owner)
	})
}
