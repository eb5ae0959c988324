package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/storage"
)

// noticeChannel is the channel of the notices sent when a claim ends.
const noticeChannel = "idempotency_claim_ended"

// noticePayload names k in a notice by 12 bytes of its digest. So neither
// scope nor key travels or lands in a log. It is well under the payload
// limit.
func noticePayload(k storage.RecordKey) string {
	h := keyDigest(k)
	return hex.EncodeToString(h[:12])
}

// Watch returns a channel and a func that stops the watch. The channel is
// closed when a claim of k ends in any process sharing the database (a
// notice from its commit). It is also closed when notices may have been
// missed: the listening connection was lost.
func (db *DB) Watch(k storage.RecordKey) (ended <-chan struct{}, stop func()) {
	return db.watcher.watch(noticePayload(k))
}

// watcher holds one connection that LISTENs for notices and wakes the
// watches they name.
type watcher struct {
	cfg  *pgx.ConnConfig
	log  *slog.Logger
	stop context.CancelFunc
	done chan struct{}
	// listening is closed once the first LISTEN has taken effect. Notices
	// sent before it are missed.
	listening     chan struct{}
	listeningOnce sync.Once

	mu      sync.Mutex
	watches map[string]map[chan struct{}]struct{} // by notice payload
	// endListen ends the current connection's listen, for reconnect.
	endListen context.CancelFunc
	// addr is the server the current connection reaches, once connected.
	addr string
}

// errReconnect is why a listen ended by reconnect ended.
var errReconnect = errors.New("reconnecting after a failed probe of the database")

func newWatcher(cfg *pgx.ConnConfig, log *slog.Logger) *watcher {
	ctx, stop := context.WithCancel(context.Background())
	w := &watcher{cfg: cfg, log: log, stop: stop, done: make(chan struct{}), listening: make(chan struct{}),
		watches: map[string]map[chan struct{}]struct{}{}}
	go w.run(ctx)
	return w
}

// waitListening waits until the watcher listens, up to timeout or ctx's
// end, and reports whether it does.
func (w *watcher) waitListening(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-w.listening:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *watcher) close() {
	w.stop()
	<-w.done
}

func (w *watcher) watch(payload string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watches[payload] == nil {
		w.watches[payload] = map[chan struct{}]struct{}{}
	}
	w.watches[payload][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.watches[payload]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(w.watches, payload)
			}
		}
	}
}

// wake ends the watches of payload, or every watch when payload is "".
func (w *watcher) wake(payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, set := range w.watches {
		if payload != "" && p != payload {
			continue
		}
		for ch := range set {
			close(ch)
		}
		delete(w.watches, p)
	}
}

// run listens until stopped, reconnecting with backoff. Each time the
// connection is lost, every watch is woken. Its notice may have been
// missed, so its waiter looks at the store again.
func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	backoff := 100 * time.Millisecond
	for {
		listening, err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		w.wake("")
		if listening {
			backoff = 100 * time.Millisecond
		}
		w.log.LogAttrs(ctx, slog.LevelWarn, "pgstore: listening for ended claims failed; waiters poll until it reconnects",
			slog.String("retry_in", backoff.String()), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// reconnect ends the listening connection, which run replaces. After a
// failed probe, the connection may lead to a server that went silent. A
// primary hung or cut off, with a standby promoted in its place, would
// never say so.
func (w *watcher) reconnect() {
	w.mu.Lock()
	end := w.endListen
	w.mu.Unlock()
	if end != nil {
		end()
	}
}

// server is the address of the server the watcher listens on, or "".
func (w *watcher) server() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addr
}

// listen connects, listens and wakes watches until the connection fails or
// reconnect ends it. Its result listening reports whether it got as far as
// listening.
func (w *watcher) listen(ctx context.Context) (listening bool, err error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.endListen = cancel
	w.mu.Unlock()
	defer func() {
		if parent.Err() == nil && ctx.Err() != nil {
			err = errReconnect
		}
	}()
	conn, err := pgx.ConnectConfig(ctx, w.cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	w.mu.Lock()
	w.addr = serverAddr(conn.PgConn())
	w.mu.Unlock()
	if _, err := conn.Exec(ctx, "LISTEN "+noticeChannel); err != nil {
		return false, err
	}
	w.listeningOnce.Do(func() { close(w.listening) })
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		w.wake(n.Payload)
	}
}
