package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// boltSource is what the operator subcommands read a bbolt data file
// through: the file itself, or the server that holds it.
type boltSource interface {
	Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error)
	// Check returns nil for a sound file and an ErrDamaged naming what is
	// wrong otherwise.
	Check(ctx context.Context) error
	// Backup writes a consistent copy of the file to w.
	Backup(ctx context.Context, w io.Writer) (int64, error)
	Close() error
}

// fileLockWait is how long a subcommand waits for the data file's lock
// before it asks the server instead. A running server never lets go, so
// waiting longer gains nothing.
const fileLockWait = 100 * time.Millisecond

// openBoltSource opens the data file at path read-only or, when a process
// holds it, asks that process, the server, through its admin socket. The
// file comes first because its lock, not the socket, tells whether a
// server runs: a server that was killed leaves its socket behind, and a
// file nobody holds needs no server. Opening it takes bbolt's shared lock
// for a moment; a server starting meanwhile waits for it (a second, then
// it gives up, naming the file).
func openBoltSource(path string) (boltSource, error) {
	ro, err := boltstore.OpenReadOnly(path, fileLockWait)
	if err == nil {
		return fileSource{ro}, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no data file at %s: is --db right?", path)
	}
	if !errors.Is(err, boltstore.ErrLocked) {
		return nil, err
	}
	return dialAdmin(path)
}

// fileSource reads a data file no server holds.
type fileSource struct{ ro *boltstore.ReadOnly }

func (f fileSource) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	return f.ro.Get(ctx, k)
}
func (f fileSource) Check(context.Context) error { return f.ro.Check() }
func (f fileSource) Backup(_ context.Context, w io.Writer) (int64, error) {
	return f.ro.WriteTo(w)
}
func (f fileSource) Close() error { return f.ro.Close() }

// adminClient asks a running server through its admin socket.
type adminClient struct {
	sock, dbPath string
	http         *http.Client
}

// dialAdmin returns a client of the admin socket of the data file at
// dbPath, which another process holds.
func dialAdmin(dbPath string) (*adminClient, error) {
	sock := adminSocketPath(dbPath)
	// A server makes its socket just after it starts serving.
	_, err := os.Stat(sock)
	for deadline := time.Now().Add(time.Second); errors.Is(err, fs.ErrNotExist) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		_, err = os.Stat(sock)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is held by another process, and there is no admin socket %s to ask it through: "+
			"is that process a paymentsd older than this command, or another program?", dbPath, sock)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			addr, done, err := shortSocketPath(sock)
			if err != nil {
				return nil, err
			}
			defer done()
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
		DisableCompression: true,
	}
	return &adminClient{sock: sock, dbPath: dbPath, http: &http.Client{Transport: tr}}, nil
}

// get asks for path and returns the answer when its status is want.
func (c *adminClient) get(ctx context.Context, path string, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://paymentsd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	switch {
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("the server holding %s: %s: permission denied: run this as the user paymentsd runs as", c.dbPath, c.sock)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("%s is held by another process, but nothing answers on %s: a paymentsd that is starting or stopping, or another program holds the file", c.dbPath, c.sock)
	case err != nil:
		return nil, fmt.Errorf("the server holding %s: %w", c.dbPath, err)
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == adminDamaged {
			return resp, remoteDamage(strings.TrimSpace(string(msg)))
		}
		return resp, fmt.Errorf("the server holding %s: %s", c.dbPath, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

func (c *adminClient) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	resp, err := c.get(ctx, "/record?"+url.Values{"scope": {k.Scope}, "key": {k.Key}}.Encode(), http.StatusOK)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the server holding %s: %w", c.dbPath, err)
	}
	rec := new(storage.Record)
	if err := rec.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("the server holding %s sent a record that does not decode: %w", c.dbPath, err)
	}
	return rec, nil
}

func (c *adminClient) Check(ctx context.Context) error {
	resp, err := c.get(ctx, "/check", http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer adminCheck
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("the server holding %s: %w", c.dbPath, err)
	}
	switch {
	case !answer.Sound:
		return remoteDamage(answer.Findings)
	case answer.CannotCommit != "":
		return cannotCommit(answer.CannotCommit)
	}
	return nil
}

func (c *adminClient) Backup(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.get(ctx, "/backup", http.StatusOK)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body) // a body short of its Content-Length is an error
	if err == nil && n != resp.ContentLength {
		err = fmt.Errorf("got %d bytes of %d", n, resp.ContentLength)
	}
	if err != nil {
		return n, fmt.Errorf("copy from the server holding %s: %w", c.dbPath, err)
	}
	return n, nil
}

func (c *adminClient) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// cannotCommit is the answer of a server that found its file sound but
// cannot commit to it, and why.
type cannotCommit string

func (e cannotCommit) Error() string { return string(e) }

// remoteDamage is an ErrDamaged the server found, with its findings.
type remoteDamage string

func (e remoteDamage) Error() string        { return string(e) }
func (e remoteDamage) Is(target error) bool { return target == boltstore.ErrDamaged }
