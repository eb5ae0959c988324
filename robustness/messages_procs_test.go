package robustness

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

// The message run's broker: the users and permissions of
// examples/jetstream's tests (docs/jetstream.md). A publisher may publish
// only to the subject that names it; the consumer's user reads through its
// durable consumer and publishes the replies.
const (
	msgPassword    = "robustness-secret"
	msgStream      = "PAYMENTS"
	msgReplyStream = "REPLIES"
	msgDurable     = "creator"
	msgAckWait     = 2 * time.Second
	msgDedup       = 2 * time.Second
)

const msgBrokerConfig = `
listen: 127.0.0.1:%d
server_name: paymentsd-robustness
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

// natsServer finds nats-server: it skips without it, and fails under
// CI=true (.ci/run installs it).
func natsServer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found and CI=true: apt-get install nats-server (%v)", err)
		}
		t.Skipf("nats-server not found: apt-get install nats-server (%v)", err)
	}
	return bin
}

// msgBroker is a nats-server with JetStream on a fixed loopback port and
// store directory, so that a restart finds its streams again.
type msgBroker struct {
	t    *testing.T
	bin  string
	conf string
	log  string
	url  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	closers []func() // the run's connections and consumers of the broker
}

func startMsgBroker(t *testing.T, bin, dir string) *msgBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	b := &msgBroker{t: t, bin: bin, conf: filepath.Join(dir, "nats.conf"), log: filepath.Join(dir, "nats.log"),
		url: "nats://127.0.0.1:" + strconv.Itoa(port)}
	if err := os.WriteFile(b.conf, fmt.Appendf(nil, msgBrokerConfig, port, filepath.Join(dir, "js"), msgPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	b.start()
	return b
}

// start starts nats-server and waits until an admin connects. The port a
// stop freed may take a moment to be free again: it tries for 20s.
func (b *msgBroker) start() {
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
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		for {
			nc, err := nats.Connect(b.url, nats.UserInfo("admin", msgPassword))
			if err == nil {
				nc.Close()
				b.mu.Lock()
				b.cmd = cmd
				b.mu.Unlock()
				return
			}
			select {
			case <-exited: // the port not free yet: try again
			case <-time.After(20 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				cmd.Process.Kill()
			}
			break
		}
		<-exited
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(b.log)
			b.t.Fatalf("nats-server did not start within 20s:\n%s", tailOf(string(out), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops nats-server with sig and waits for its exit. SIGTERM shuts it
// down cleanly, its streams flushed to the store directory.
func (b *msgBroker) stop(sig syscall.Signal) {
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

// close closes the run's connections, then stops the broker, so that a
// suite's runs leave nothing behind them.
func (b *msgBroker) close() {
	b.mu.Lock()
	closers := b.closers
	b.closers = nil
	b.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	b.stop(syscall.SIGKILL)
}

// restart stops the broker with SIGTERM and starts it on the same port and
// store directory.
func (b *msgBroker) restart() {
	b.stop(syscall.SIGTERM)
	b.start()
}

// connect connects as user, reconnecting for ever, for the test's length.
func (b *msgBroker) connect(user string) (*nats.Conn, jetstream.JetStream) {
	b.t.Helper()
	nc, err := nats.Connect(b.url, nats.UserInfo(user, msgPassword), nats.Name("robustness-"+user),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		b.t.Fatal(err)
	}
	b.mu.Lock()
	b.closers = append(b.closers, nc.Close)
	b.mu.Unlock()
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	return nc, js
}

// setUp creates the streams and the durable consumer, as the operator
// does (docs/jetstream.md), with a short AckWait.
func (b *msgBroker) setUp(js jetstream.JetStream) jetstream.Consumer {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: msgStream, Subjects: []string{"payments.create.>"},
		Storage: jetstream.FileStorage, Duplicates: msgDedup}); err != nil {
		b.t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: msgReplyStream, Subjects: []string{"payments.replies.>"},
		Storage: jetstream.FileStorage}); err != nil {
		b.t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, msgStream, jetstream.ConsumerConfig{Durable: msgDurable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: msgAckWait, MaxDeliver: -1, MaxAckPending: 1000,
		FilterSubject: "payments.create.>"})
	if err != nil {
		b.t.Fatal(err)
	}
	return cons
}

var (
	exampleOnce sync.Once
	exampleBin  string
	exampleErr  error
)

// exampleBinary builds examples/jetstream once per test process, into
// the directory of paymentsd's binaries, which TestMain removes.
func exampleBinary(t *testing.T) string {
	t.Helper()
	exampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paymentsd-robustness-bin-")
		if err != nil {
			exampleErr = err
			return
		}
		buildMu.Lock()
		built["example jetstream"] = filepath.Join(dir, "jetstream")
		buildMu.Unlock()
		exampleBin = filepath.Join(dir, "jetstream")
		if out, err := exec.Command("go", "build", "-o", exampleBin, "../examples/jetstream").CombinedOutput(); err != nil {
			exampleErr = fmt.Errorf("go build examples/jetstream: %v\n%s", err, out)
		}
	})
	if exampleErr != nil {
		t.Fatal(exampleErr)
	}
	return exampleBin
}

// msgConsumer is one process of the example, started again after a kill.
// Its runs all log to one file.
type msgConsumer struct {
	t    *testing.T
	bin  string
	args []string
	env  []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
}

func startMsgConsumer(t *testing.T, bin, log string, env []string, args ...string) *msgConsumer {
	t.Helper()
	p := &msgConsumer{t: t, bin: bin, args: args, env: env, log: log}
	p.start()
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

func (p *msgConsumer) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.starts++
	p.mu.Unlock()
}

// ready reports whether the latest start binds its consumer.
func (p *msgConsumer) ready() bool {
	p.mu.Lock()
	starts := p.starts
	p.mu.Unlock()
	return strings.Count(p.logs(), `"msg":"consuming"`) >= starts
}

// kill kills the process with SIGKILL and starts it again.
func (p *msgConsumer) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	p.start()
}

// pause stops the process with SIGSTOP for d, past AckWait, so that the
// broker redelivers what it held; then SIGCONT. stopped runs once it is
// stopped.
func (p *msgConsumer) pause(d time.Duration, stopped func()) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGSTOP)
	stopped()
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGCONT)
}

// stop stops the process with SIGTERM; an unclean exit is returned.
func (p *msgConsumer) stop() error {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("consumer %s exited: %v", filepath.Base(p.log), err)
		}
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("consumer %s did not stop within 30s of SIGTERM", filepath.Base(p.log))
	}
}

func (p *msgConsumer) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// tailOf is the last n lines of s.
func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
