package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
	"github.com/paymentsd/paymentsd/daemon/testkit/proctest"
	"github.com/paymentsd/paymentsd/storage"
)

// runExample runs the example's binary to its end with args, as a user of
// the test's broker, and returns its standard output.
func runExample(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "NATS_PASSWORD="+natstest.Password)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jetstream %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// --setup creates the streams and the durable consumer of docs/jetstream.md,
// and run again finds them: the command is idempotent.
func TestSetup_CreatesTheStreamsAndTheConsumer(t *testing.T) {
	b := natstest.Start(t, t.TempDir())
	for range 2 {
		out := runExample(t, nil, "--nats", b.URL, "--user", natstest.Admin, "--setup", "--ttl", "1h")
		if !strings.Contains(out, "are ready") {
			t.Errorf("--setup printed %q", out)
		}
	}
	_, admin := b.Connect(natstest.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := admin.Stream(ctx, natstest.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.Duplicates != 2*time.Minute || cfg.Storage != jetstream.FileStorage {
		t.Errorf("stream %s: MaxAge %v, Duplicates %v, storage %v; want 1h, 2m, file", cfg.Name, cfg.MaxAge, cfg.Duplicates, cfg.Storage)
	}
	cons, err := s.Consumer(ctx, natstest.Creator)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.MaxDeliver != 100 || cfg.FilterSubject != createPrefix+">" {
		t.Errorf("consumer %s: %+v", natstest.Creator, cfg)
	}
	if _, err := admin.Stream(ctx, natstest.ReplyStream); err != nil {
		t.Errorf("stream %s: %v", natstest.ReplyStream, err)
	}
}

// The running example deletes its expired records. A record of a 2s TTL
// is swept while the consumer runs; its intent stays.
func TestSweeper_DeletesExpiredRecords(t *testing.T) {
	b := natstest.Start(t, t.TempDir())
	runExample(t, nil, "--nats", b.URL, "--user", natstest.Admin, "--setup")
	dir := t.TempDir()
	path := filepath.Join(dir, "payments.db")
	p := startConsumer(t, dir, "consumer", []string{"NATS_PASSWORD=" + natstest.Password}, "--nats", b.URL, "--user", natstest.Creator,
		"--db", path, "--ttl", "2s", "--lease", "1s", "--sweep-interval", "100ms")

	out := runExample(t, body(5), "--nats", b.URL, "--user", "alice", "--publish", "order-1")
	if !strings.Contains(out, "Status-Code: OK") || strings.Contains(out, replayHeader) {
		t.Fatalf("--publish printed\n%s\nwant a fresh create", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, ctx, "the record's sweep", func() bool {
		return strings.Contains(p.Logs(), `"msg":"swept expired records","count":1`)
	}, []*proctest.Proc{p})
	stopConsumer(t, p)

	db, err := boltintents.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.Records().CountRecords(ctx); n != 0 || err != nil {
		t.Errorf("%d records left, %v; want the expired one deleted", n, err)
	}
	if rec, err := db.Records().Get(ctx, storage.RecordKey{Scope: "alice", Key: "order-1"}); rec != nil || err != nil {
		t.Errorf("the record of order-1 is still there: %v, %v", rec, err)
	}
	if intents, _, err := db.Intents().ListIntents(ctx, "alice", nil, 10); len(intents) != 1 || err != nil {
		t.Errorf("alice's intents: %d, %v; want the one created", len(intents), err)
	}
}
