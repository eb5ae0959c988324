// Package natstest starts a real nats-server with JetStream for tests:
// the users, permissions, streams and durable consumer that
// docs/jetstream.md sets up. A publisher may publish only to the subject
// that names it. The consumer's user reads through its durable consumer
// and publishes the replies.
package natstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The broker's users, streams and settings.
const (
	Password      = "test-secret" // every user's
	Admin         = "admin"       // sets the streams up
	Creator       = "creator"     // the consumer's user
	CommandStream = "PAYMENTS"
	ReplyStream   = "REPLIES"
	AckWait       = 2 * time.Second
	DedupWindow   = 2 * time.Second
)

const config = `
listen: 127.0.0.1:%d
server_name: paymentsd-test
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
accounts {
  PAYMENTS {
    jetstream: enabled
    users: [
      { user: admin, password: %[3]q }
      { user: creator, password: %[3]q, permissions: {
          publish: { allow: ["$JS.API.CONSUMER.INFO.PAYMENTS.*", "$JS.API.CONSUMER.MSG.NEXT.PAYMENTS.*",
                             "$JS.ACK.PAYMENTS.>", "payments.replies.>"] }
          subscribe: { allow: ["_INBOX.>"] } } }
      { user: alice, password: %[3]q, permissions: {
          publish: { allow: ["payments.create.alice"] }
          subscribe: { allow: ["_INBOX.>", "payments.replies.alice"] } } }
      { user: bob, password: %[3]q, permissions: {
          publish: { allow: ["payments.create.bob"] }
          subscribe: { allow: ["_INBOX.>", "payments.replies.bob"] } } }
    ]
  }
}
`

// Broker is a nats-server with JetStream on a fixed loopback port and store
// directory, so that a restart finds its streams again.
type Broker struct {
	URL string

	t    testing.TB
	bin  string
	conf string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	closers []func()
}

// Start starts nats-server in dir. It skips without nats-server, and fails
// under CI=true. The test's end closes what Track was given, then kills
// the broker.
func Start(t testing.TB, dir string) *Broker {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found and CI=true: apt-get install nats-server (%v)", err)
		}
		t.Skipf("nats-server not found: apt-get install nats-server (%v)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	b := &Broker{t: t, bin: bin, conf: filepath.Join(dir, "nats.conf"), log: filepath.Join(dir, "nats.log"),
		URL: "nats://127.0.0.1:" + strconv.Itoa(port)}
	if err := os.WriteFile(b.conf, fmt.Appendf(nil, config, port, filepath.Join(dir, "js"), Password), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	b.start()
	return b
}

// start starts nats-server and waits until an admin connects. The port a
// stop freed may take a moment to be free again: it tries for 20s.
func (b *Broker) start() {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := os.OpenFile(b.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			b.t.Fatal(err)
		}
		cmd := exec.Command(b.bin, "-c", b.conf)
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Start()
		f.Close()
		if err != nil {
			b.t.Fatal(err)
		}
		if b.await(cmd, deadline) {
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(b.log)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			b.t.Fatalf("nats-server did not start within 20s:\n%s", strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// await reports whether cmd serves an admin before deadline. When it does
// not, cmd has exited.
func (b *Broker) await(cmd *exec.Cmd, deadline time.Time) bool {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	for {
		nc, err := nats.Connect(b.URL, nats.UserInfo(Admin, Password))
		if err == nil {
			nc.Close()
			b.mu.Lock()
			b.cmd = cmd
			b.mu.Unlock()
			return true
		}
		select {
		case <-exited: // the port not free yet: try again
			return false
		case <-time.After(20 * time.Millisecond):
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-exited
				return false
			}
		}
	}
}

// stop stops nats-server with sig and waits for its exit. SIGTERM shuts it
// down cleanly, its streams flushed to the store directory.
func (b *Broker) stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd := b.cmd
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Restart stops the broker with SIGTERM and starts it on the same port and
// store directory.
func (b *Broker) Restart() {
	b.stop(syscall.SIGTERM)
	b.start()
}

// Close closes what Track was given, newest first, then kills the broker.
func (b *Broker) Close() {
	b.mu.Lock()
	closers := b.closers
	b.closers = nil
	b.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	b.stop(syscall.SIGKILL)
}

// Track has Close call close before it stops the broker.
func (b *Broker) Track(close func()) {
	b.mu.Lock()
	b.closers = append(b.closers, close)
	b.mu.Unlock()
}

// Connect connects as user, reconnecting for ever, until Close.
func (b *Broker) Connect(user string) (*nats.Conn, jetstream.JetStream) {
	b.t.Helper()
	nc, err := nats.Connect(b.URL, nats.UserInfo(user, Password), nats.Name("test-"+user),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // a refusal a test expects
	if err != nil {
		b.t.Fatal(err)
	}
	b.Track(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	return nc, js
}

// SetUp creates the streams of commands and replies, and the durable
// consumer named durable, as the operator does.
func (b *Broker) SetUp(js jetstream.JetStream, durable string) jetstream.Consumer {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: CommandStream, Subjects: []string{"payments.create.>"},
		Storage: jetstream.FileStorage, Duplicates: DedupWindow}); err != nil {
		b.t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: ReplyStream, Subjects: []string{"payments.replies.>"},
		Storage: jetstream.FileStorage}); err != nil {
		b.t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, CommandStream, jetstream.ConsumerConfig{Durable: durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: AckWait, MaxDeliver: -1, MaxAckPending: 1000,
		FilterSubject: "payments.create.>"})
	if err != nil {
		b.t.Fatal(err)
	}
	return cons
}
