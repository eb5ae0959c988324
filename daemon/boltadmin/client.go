package boltadmin

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
	"github.com/paymentsd/paymentsd/storage"
)

// Client asks a running server through its admin socket.
type Client struct {
	sock, dbPath string
	http         *http.Client
}

// Dial returns a client of the admin socket of the data file at dbPath.
// Another process holds that file. Dial waits a second for the socket to
// appear. A server makes it just after it starts serving.
func Dial(dbPath string) (*Client, error) {
	sock := SocketPath(dbPath)
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
	return &Client{sock: sock, dbPath: dbPath, http: &http.Client{Transport: tr}}, nil
}

// get asks for path and returns the answer when its status is want.
func (c *Client) get(ctx context.Context, path string, want int) (*http.Response, error) {
	return c.do(ctx, http.MethodGet, path, nil, want)
}

// do sends a request and returns the answer when its status is want. The
// request is a form when body is not nil.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://paymentsd"+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
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
		if resp.StatusCode == statusDamaged {
			return resp, remoteDamage(strings.TrimSpace(string(msg)))
		}
		return resp, fmt.Errorf("the server holding %s: %s", c.dbPath, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// GetJSON asks for path, a Route's, and decodes its answer into v. An
// answer other than 200 is an error that carries its body.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	resp, err := c.get(ctx, path, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("the server holding %s: %w", c.dbPath, err)
	}
	return nil
}

// Get returns the record stored for k, live or expired, or nil when there
// is none.
func (c *Client) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	resp, err := c.get(ctx, "/record?"+url.Values{"scope": {k.Scope}, "key": {k.Key}}.Encode(), http.StatusOK)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c.readRecord(resp)
}

// readRecord reads the record an answer carries.
func (c *Client) readRecord(resp *http.Response) (*storage.Record, error) {
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

// Check has the server check its file. It returns nil when the file is
// sound and the server can commit to it. Otherwise it returns an
// ErrDamaged with the findings, or a *CannotCommitError.
func (c *Client) Check(ctx context.Context) error {
	resp, err := c.get(ctx, "/check", http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer checkAnswer
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("the server holding %s: %w", c.dbPath, err)
	}
	switch {
	case !answer.Sound:
		return remoteDamage(answer.Findings)
	case answer.CannotCommit != "":
		return &CannotCommitError{Reason: answer.CannotCommit}
	}
	return nil
}

// Backup writes a consistent copy of the server's file to w. A copy cut
// short is an error.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
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

// Close drops the client's idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// CannotCommitError says why a server cannot commit to a file it found
// sound. A failing disk is such a case.
type CannotCommitError struct{ Reason string }

func (e *CannotCommitError) Error() string { return e.Reason }

// remoteDamage is an ErrDamaged the server found, with its findings.
type remoteDamage string

func (e remoteDamage) Error() string        { return string(e) }
func (e remoteDamage) Is(target error) bool { return target == boltstore.ErrDamaged }
