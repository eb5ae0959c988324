package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// confirmRecordSQL makes the transaction that read a record wait, as it
// commits, until the synchronous standby has that record. It locks the
// record's row FOR KEY SHARE, which writes WAL and so makes the COMMIT wait
// for the standby, as a create's does. WAL is confirmed in order: once
// this commit is, the record's own commit, before it, is too. A KEY SHARE
// lock waits for no other, so replays of one key do not queue. Without
// synchronous_standby_names it locks nothing and costs nothing. It is
// false when the record has gone meanwhile: the claim then looks again.
// (Assigning a transaction id alone would not do: a commit that wrote no
// WAL does not wait for the standby.)
const confirmRecordSQL = `SELECT current_setting('synchronous_standby_names') = ''
	OR EXISTS (SELECT FROM idempotency_records r WHERE r.scope = $1 AND r.key = $2 FOR KEY SHARE)`

// proveReadSQL makes the transaction it runs in wait, as it commits, until
// the synchronous standby has the server's WAL up to that commit: what the
// transaction's connection read before it is then known to be on the
// standby, and known to be current. An old primary left running after a
// failover, which has lost its standby, never confirms it. The message it
// writes is a few bytes of WAL that only logical decoding reads. Writing
// it assigns a transaction id, which a commit must have to wait. Without
// synchronous_standby_names it writes nothing.
const proveReadSQL = `SELECT CASE WHEN current_setting('synchronous_standby_names') = '' THEN true
	ELSE pg_logical_emit_message(true, 'paymentsd', '') IS NOT NULL END`

// syncStandbySQL tells whether the server has a synchronous standby
// configured. The health probe then writes heartbeatSQL, as a create
// writes, and its commit waits for the standby. Otherwise it writes
// nothing: a read-only database stays healthy until a write fails there.
const syncStandbySQL = `SELECT current_setting('synchronous_standby_names') <> ''`

// heartbeatSQL is the health probe's write. One row per process, so that
// the probes of replicas never queue for each other's row lock. A probe
// that queues behind its own process's earlier one, given up and still
// waiting for the standby, has found a stall (see confirmed).
const heartbeatSQL = `INSERT INTO idempotency_heartbeats (claimant, beat_time) VALUES ($1, clock_timestamp())
	ON CONFLICT (claimant) DO UPDATE SET beat_time = excluded.beat_time`

// standbyStall is how long the health probe's commit may wait for the
// synchronous standby. It normally takes milliseconds. Past this the
// server is taken to have lost its standby: a failover under way, an old
// primary left running after one, or the only standby down.
const standbyStall = 5 * time.Second

// suspectFor is how long new connections try a server last after its
// commits first stalled, unless one is confirmed there first. It lapses so
// that a new primary that stalled only while its own standby caught up is
// tried again: when two writable servers are suspect, pgx falls back to
// the last in the URL, which may be an old primary that never recovers.
// A server marked again soon after its suspicion lapsed is suspect twice
// as long as before, up to maxSuspectFor: an old primary that stalls on
// and on is passed over long after a new one that stalled once.
const (
	suspectFor    = 15 * time.Second
	maxSuspectFor = 5 * time.Minute
)

// suspicion is how long a server is suspect, and until when.
type suspicion struct {
	until time.Time
	span  time.Duration
}

// standby is what the store knows of its server's synchronous standby.
type standby struct {
	mu      sync.Mutex
	since   time.Time     // when the pending confirmation began; zero if none
	conn    *pgxpool.Conn // the pending confirmation's connection
	done    chan error    // the pending confirmation's outcome
	stalled error         // the last stall, until a confirmation comes
	// waiting is when the first confirmation not yet followed by one that
	// came began; zero when the last one came.
	waiting time.Time
	// followed is when followCommits last reconnected the listener.
	followed time.Time

	// suspects holds the servers whose commits stalled, until one is
	// confirmed there or the suspicion lapses (see preferConfirmed).
	suspects sync.Map // server address -> suspicion
	// commits holds the connections whose commit may be waiting for the
	// standby now, with their server's address (see giveUpCommits).
	commits sync.Map // *pgconn.PgConn -> string

	// cancelled holds the connections on which a commit's wait for the
	// standby was cancelled by someone else (an operator, the server's
	// own statement_timeout). Such a commit is kept locally only.
	cancelled sync.Map // *pgconn.PgConn -> struct{}

	readOnly    atomic.Uint64 // statements refused by a read-only server
	unconfirmed atomic.Uint64 // confirmations that did not come in time
	lastDrop    atomic.Int64  // unix nanoseconds of the last dropConnections noted here
}

// configure adds to cfg, made by ConfigurePool, what a DB of Open's own
// tracks: the server's warnings of a wait cancelled all the same
// (noteNotice), and servers whose commits stalled, tried last
// (preferConfirmed).
func (s *standby) configure(cfg *pgconn.Config) {
	onNotice := cfg.OnNotice
	cfg.OnNotice = func(conn *pgconn.PgConn, n *pgconn.Notice) {
		s.noteNotice(conn, n)
		if onNotice != nil {
			onNotice(conn, n)
		}
	}
	validate := cfg.ValidateConnect
	cfg.ValidateConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if validate != nil {
			if err := validate(ctx, conn); err != nil {
				return err
			}
		}
		return s.preferConfirmed(ctx, conn)
	}
}

// Replication is what a DB has seen of its server's replication, for the
// metrics.
type Replication struct {
	// ReadOnlyErrors counts statements refused because the server was
	// read-only: a member demoted, or a standby that a pooled connection
	// still reached.
	ReadOnlyErrors uint64
	// Unconfirmed counts commits that were to prove a synchronous standby
	// has the WAL and ran out of time: a replay's, or a health probe's.
	// Other failures of theirs (a server restarting, say) are not counted.
	Unconfirmed uint64
	// Waiting is how long the health probe's commits have waited for the
	// synchronous standby with none confirmed; 0 once one is, or once one
	// fails otherwise.
	Waiting time.Duration
}

// Replication returns what db has seen of its server's replication.
func (db *DB) Replication() Replication {
	s := db.standby
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Replication{ReadOnlyErrors: s.readOnly.Load(), Unconfirmed: s.unconfirmed.Load()}
	if !s.waiting.IsZero() {
		r.Waiting = time.Since(s.waiting)
	}
	return r
}

// probeStandby commits a transaction that waits for the synchronous
// standby, one at a time and never cancelled. A health probe waits up to a
// second for it; a slower one is left to finish and looked at again by the
// next. One that waits standbyStall is given up: its connection is closed
// (its backend waits on, invisible), its server is suspect, and the pool's
// connections are dropped so that new ones find a server whose commits are
// confirmed. Health stays failed until a confirmation comes.
func (db *DB) probeStandby(ctx context.Context) error {
	s := db.standby
	if err := db.beginBeat(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	done, since := s.done, s.since
	s.mu.Unlock()

	wait := time.NewTimer(min(time.Second, max(0, standbyStall-time.Since(since))))
	defer wait.Stop()
	select {
	case err := <-done:
		return db.confirmed(done, err)
	case <-wait.C:
	case <-ctx.Done():
	}
	if time.Since(since) >= standbyStall {
		return db.stall(done)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled
}

// beginBeat begins a heartbeat unless one is pending. The scrape of
// Replication is not kept waiting meanwhile: the pool may be slow to give
// a connection.
func (db *DB) beginBeat(ctx context.Context) error {
	s := db.standby
	s.mu.Lock()
	pending := s.done != nil
	s.mu.Unlock()
	if pending {
		return nil
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: database unreachable: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil { // another probe began one meanwhile
		conn.Release()
		return nil
	}
	s.since, s.conn, s.done = time.Now(), conn, make(chan error, 1)
	if s.waiting.IsZero() {
		s.waiting = s.since
	}
	go func(done chan<- error) { done <- beat(conn, db.ledger.Claimant().ID) }(s.done)
	return nil
}

// endBeat ends a heartbeat still pending at Close, which no probe will
// confirm: its connection goes back to the pool, whose Close waits for
// it. One that does not answer within beatGrace (its commit waiting for a
// standby that is gone) has its connection closed under it.
func (db *DB) endBeat() {
	s := db.standby
	s.mu.Lock()
	conn, done := s.conn, s.done
	s.conn, s.done = nil, nil
	s.mu.Unlock()
	if conn == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(beatGrace):
		conn.Conn().PgConn().Conn().Close() // the beat's read fails, and it ends
		<-done
	}
	conn.Release()
}

// beatGrace is how long Close waits for a pending heartbeat.
const beatGrace = time.Second

// beat writes the health probe's heartbeat on conn when the server has a
// synchronous standby. Its context is never cancelled (see probeStandby).
func beat(conn *pgxpool.Conn, claimant string) error {
	var sync bool
	if err := conn.QueryRow(context.Background(), syncStandbySQL).Scan(&sync); err != nil || !sync {
		return err
	}
	_, err := conn.Exec(context.Background(), heartbeatSQL, claimant)
	return err
}

// confirmed ends the pending confirmation done with its outcome. A
// heartbeat that could not lock its row within LockTimeout found an
// earlier one of this process's waiting there still, given up by stall:
// the server's commits still stall, and it is suspect again.
func (db *DB) confirmed(done chan error, err error) error {
	s := db.standby
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != done {
		return s.stalled // another probe ended it
	}
	addr := serverAddr(s.conn.Conn().PgConn())
	s.conn.Release()
	s.since, s.conn, s.done = time.Time{}, nil, nil
	switch {
	case isLockTimeout(err):
		s.suspect(addr)
		go db.dropSoon() // not under s.mu
		s.stalled = fmt.Errorf("pgstore: commits are not confirmed by a synchronous standby: an earlier one still waits on %s", addr)
	case err != nil:
		// A failure, not a stall: the server said no, or went away. The
		// wait is over.
		s.waiting = time.Time{}
		s.stalled = fmt.Errorf("pgstore: a commit that waits for the synchronous standby failed: %w", err)
	default:
		s.stalled, s.waiting = nil, time.Time{}
		s.suspects.Delete(addr)
		db.followCommits(addr)
	}
	return s.stalled
}

// followCommits reconnects the listener for ended claims when it listens
// on another server than addr, where commits were just confirmed: claims
// end there, and their notices are sent there. An old primary left
// running after a failover may have taken its connection without ever
// stalling a commit of this process's. That server is marked suspect, so
// that the listener's new connection goes elsewhere. It does so at most
// every 30 s: a server reached by two addresses (IPv4 and IPv6, say)
// costs no more than a reconnection then, and its commits are not given
// up.
func (db *DB) followCommits(addr string) {
	s := db.standby
	w := db.watcher.server()
	if w == "" || w == addr || time.Since(s.followed) < 30*time.Second {
		return
	}
	s.followed = time.Now()
	s.mark(w)
	go db.watcher.reconnect() // not under s.mu
}

// suspect makes addr suspect (mark) and gives up the commits waiting
// there.
func (s *standby) suspect(addr string) {
	s.mark(addr)
	s.giveUpCommits(addr)
}

// mark makes addr suspect for suspectFor from now, unless it is still. A
// server whose suspicion lapsed lately, within as long again, is suspect
// twice as long as last time. Many commits that stall at once count once.
func (s *standby) mark(addr string) { s.markAt(addr, time.Now()) }

// markAt is mark at now.
func (s *standby) markAt(addr string, now time.Time) {
	span := suspectFor
	if v, ok := s.suspects.Load(addr); ok {
		last := v.(suspicion)
		switch {
		case now.Before(last.until):
			return
		case now.Before(last.until.Add(last.span)):
			span = min(2*last.span, maxSuspectFor)
		}
	}
	s.suspects.Store(addr, suspicion{until: now.Add(span), span: span})
}

// committing notes that conn's commit may wait for the standby until the
// returned func is called.
func (s *standby) committing(conn *pgconn.PgConn) (done func()) {
	s.commits.Store(conn, serverAddr(conn))
	return func() { s.commits.Delete(conn) }
}

// giveUpCommits closes the connections of the commits waiting on addr,
// once it is suspect. Their backends wait on, invisible, and no cancel
// request is sent (see refuseCancelRequests). Their callers are told the
// outcome is unknown at once, rather than at their deadline, and their
// retries find a server whose commits are confirmed. Meanwhile their
// connections would also hold the pool's every slot: no probe or call
// could get one.
func (s *standby) giveUpCommits(addr string) {
	s.commits.Range(func(k, v any) bool {
		if v.(string) == addr {
			k.(*pgconn.PgConn).Conn().Close()
		}
		return true
	})
}

// stall gives up the pending confirmation done, which waited standbyStall.
func (db *DB) stall(done chan error) error {
	s := db.standby
	s.mu.Lock()
	if s.done != done {
		defer s.mu.Unlock()
		return s.stalled // another probe ended it
	}
	conn, addr := s.conn, serverAddr(s.conn.Conn().PgConn())
	s.stalled = fmt.Errorf("pgstore: commits are not confirmed by a synchronous standby: one waited %s on %s; the server may have lost its standby, or be an old primary after a failover",
		time.Since(s.since).Round(time.Millisecond), addr)
	s.since, s.conn, s.done = time.Time{}, nil, nil
	stalled := s.stalled
	s.mu.Unlock()

	s.unconfirmed.Add(1)
	s.suspect(addr)
	// Closing the socket ends the Exec with an error, and no cancel
	// request is sent (see refuseCancelRequests).
	conn.Conn().PgConn().Conn().Close()
	<-done
	conn.Release()
	db.dropConnections()
	return stalled
}

// preferConfirmed makes new connections try a suspect server last: one
// whose commits stalled, until a commit is confirmed there or suspectFor
// has passed. After a failover that left the old primary writable, it is
// still first in the URL; the new primary is then found. When no other
// host accepts writes the suspect is used, and the health probe's next
// commit there, once confirmed, clears it.
func (s *standby) preferConfirmed(ctx context.Context, conn *pgconn.PgConn) error {
	addr := serverAddr(conn)
	v, ok := s.suspects.Load(addr)
	if !ok || time.Now().After(v.(suspicion).until) {
		return nil
	}
	// pgx tries a host last only for its own NotPreferredError, which
	// only its validators make. On a primary, this one makes it.
	return pgconn.ValidateConnectTargetSessionAttrsPreferStandby(ctx, conn)
}

// noteStall marks conn's server suspect when err says a commit on it ran
// out of time, and drops the pool's connections (see preferConfirmed). It
// reports whether it did. A commit that waits for a standby that has gone
// stalls so, and the pool's other connections to that server would too. The health probe may not
// find it first: while such commits hold every pooled connection, the
// probe cannot get one.
func (db *DB) noteStall(conn *pgconn.PgConn, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
		return false
	}
	db.standby.suspect(serverAddr(conn))
	db.dropSoon()
	return true
}

// noteNotice keeps track of commits whose wait for the standby was
// cancelled. PostgreSQL says so with a warning, and the COMMIT succeeds.
func (s *standby) noteNotice(conn *pgconn.PgConn, n *pgconn.Notice) {
	if n.Severity == "WARNING" && (strings.Contains(n.Detail, "committed locally") || strings.Contains(n.Message, "synchronous replication")) {
		s.cancelled.Store(conn, struct{}{})
	}
}

// errWaitCancelled is a commit kept locally whose wait for the standby was
// cancelled: a failover may lose it.
var errWaitCancelled = errors.New("pgstore: the commit's wait for the synchronous standby was cancelled on the server: it is kept locally, and the standby may not have it")

// waitCancelled reports, once, whether a commit's wait for the standby
// was cancelled on conn since it was last asked.
func (s *standby) waitCancelled(conn *pgconn.PgConn) bool {
	_, ok := s.cancelled.LoadAndDelete(conn)
	return ok
}

// noteReadOnly drops the pool's connections when a statement found the
// server read-only: a demoted member, or a standby reached after a
// failover. New connections then find the primary at once, rather than at
// the next probe.
func (db *DB) noteReadOnly() {
	db.standby.readOnly.Add(1)
	db.dropSoon()
}

// dropSoon drops the pool's connections, at most every 100 ms.
func (db *DB) dropSoon() {
	s := db.standby
	now := time.Now().UnixNano()
	if last := s.lastDrop.Load(); now-last > int64(100*time.Millisecond) && s.lastDrop.CompareAndSwap(last, now) {
		db.dropConnections()
	}
}
