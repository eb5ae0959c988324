package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishCommand publishes a create command as principal, under key. A
// msgID lets the broker drop a copy published again within its Duplicates
// window; the key itself is a good one.
func publishCommand(ctx context.Context, js jetstream.JetStream, principal, key, msgID string, body []byte) (*jetstream.PubAck, error) {
	m := nats.NewMsg("payments.create." + principal)
	m.Header.Set("Idempotency-Key", key)
	m.Data = body
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	return js.PublishMsg(ctx, m, opts...)
}

// runPublish publishes the command of --publish as --user, its body read
// from in, and prints its reply on out: the headers, then the body. It
// listens for the reply before it publishes, so that none is missed.
func runPublish(ctx context.Context, c config, log *slog.Logger, in io.Reader, out io.Writer) error {
	body, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	nc, err := connect(c, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(replyPrefix + c.user)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.replyTimeout)
	defer cancel()
	ack, err := publishCommand(ctx, js, c.user, c.publish, c.msgID, body)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if ack.Duplicate {
		_, err := fmt.Fprintf(out, "the broker dropped the command: a copy of sequence %d, within its dedup window\n", ack.Sequence)
		return err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("no reply to command %d: %w", ack.Sequence, err)
		}
		if m.Header.Get(commandHeader) == strconv.FormatUint(ack.Sequence, 10) {
			return printReply(out, m)
		}
	}
}

// printReply prints a reply's headers, in a fixed order, and its body as
// indented JSON.
func printReply(out io.Writer, m *nats.Msg) error {
	var b bytes.Buffer
	for _, h := range []string{keyHeader, statusHeader, commandHeader, replayHeader} {
		if v := m.Header.Get(h); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	if err := json.Indent(&b, m.Data, "", "  "); err != nil { // also drops protojson's random spaces
		return fmt.Errorf("reply body %q: %w", m.Data, err)
	}
	b.WriteByte('\n')
	_, err := out.Write(b.Bytes())
	return err
}
