package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The users of the test broker. Each publisher may publish only to the
// subject that names it. The consumer's user reads through its durable
// consumer and publishes the replies.
const (
	adminUser   = "admin"
	creatorUser = "creator"
	password    = "test-secret"
)

// brokerConfig is nats-server's configuration: JetStream in dir, and the
// users with their permissions.
const brokerConfig = `
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

// broker is a nats-server with JetStream, for one test.
type broker struct {
	url string
}

// startBroker starts nats-server on a free loopback port in a temporary
// directory. It skips without nats-server, and fails under CI=true.
func startBroker(t testing.TB) *broker {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found and CI=true: apt-get install nats-server (%v)", err)
		}
		t.Skipf("nats-server not found: apt-get install nats-server (%v)", err)
	}
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, brokerConfig, port, filepath.Join(dir, "js"), password), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	b := &broker{url: "nats://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(b.url, nats.UserInfo(adminUser, password))
		if err == nil {
			nc.Close()
			return b
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("nats-server did not start: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort is a loopback port free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// connect connects as user, for the length of the test.
func (b *broker) connect(t testing.TB, user string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(b.url, nats.UserInfo(user, password), nats.Name("test-"+user),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // a refusal a test expects
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Stream and consumer settings of the tests: see docs/jetstream.md.
const (
	commandStream = "PAYMENTS"
	replyStream   = "REPLIES"
	ackWait       = 2 * time.Second
	dedupWindow   = 2 * time.Second
)

// setUp creates the streams of commands and replies, and the durable
// consumer named durable, as the operator does.
func setUp(t testing.TB, js jetstream.JetStream, durable string) jetstream.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: commandStream, Subjects: []string{"payments.create.>"},
		Storage: jetstream.FileStorage, Duplicates: dedupWindow}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: replyStream, Subjects: []string{"payments.replies.>"},
		Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, commandStream, jetstream.ConsumerConfig{Durable: durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1, MaxAckPending: 1000,
		FilterSubject: "payments.create.>"})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// The broker binds a command's subject to its publisher: alice's command
// for bob is refused, and never reaches the stream.
func TestBroker_BindsTheSubjectToItsPublisher(t *testing.T) {
	b := startBroker(t)
	_, admin := b.connect(t, adminUser)
	setUp(t, admin, "creator")
	_, alice := b.connect(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := alice.Publish(short, createPrefix+"bob", body(1)); err == nil {
		t.Error("alice published a command as bob")
	}
	if _, err := alice.Publish(ctx, createPrefix+"alice", body(1)); err != nil {
		t.Fatalf("alice's own command: %v", err)
	}
	s, err := admin.Stream(ctx, commandStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the stream holds %d commands; want alice's one", info.State.Msgs)
	}
}
