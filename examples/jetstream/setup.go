package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// replyStream is the stream of replies that --setup creates.
const replyStream = "REPLIES"

// setUp creates the stream of commands, its durable consumer and the
// stream of replies, or updates them to these settings. A command or reply
// lives no longer than a record (--ttl): an older command would run again.
func setUp(ctx context.Context, js jetstream.JetStream, c config) error {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: c.stream,
		Subjects: []string{"payments.create.>"}, Storage: jetstream.FileStorage,
		Duplicates: min(2*time.Minute, c.ttl), MaxAge: c.ttl}); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{Durable: c.durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 100,
		FilterSubject: "payments.create.>"}); err != nil {
		return err
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: replyStream, // optional
		Subjects: []string{"payments.replies.>"}, Storage: jetstream.FileStorage, MaxAge: c.ttl})
	return err
}

// runSetup connects as the operator's user, runs setUp, and says what it
// made on out.
func runSetup(ctx context.Context, c config, log *slog.Logger, out io.Writer) error {
	nc, err := connect(c, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := setUp(ctx, js, c); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	_, err = fmt.Fprintf(out, "stream %s, durable consumer %s and stream %s are ready\n", c.stream, c.durable, replyStream)
	return err
}
