package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connectWait is how long connect waits for a server that is not up yet,
// such as one started a moment before.
const connectWait = 30 * time.Second

// connect connects to NATS as the user of the flags.
func connect(c config, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("paymentsd-jetstream"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil on our own Close
				log.Warn("nats: disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats: reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	switch {
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	deadline := time.Now().Add(connectWait)
	for {
		nc, err := nats.Connect(c.natsURL, opts...)
		switch {
		case err == nil:
			return nc, nil
		case !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline):
			return nil, fmt.Errorf("nats: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bind finds the durable consumer. The operator creates it, with the
// stream: this program only reads through it.
func bind(ctx context.Context, nc *nats.Conn, c config) (jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, c.stream, c.durable)
	if err != nil {
		return nil, fmt.Errorf("consumer %s of stream %s: %w", c.durable, c.stream, err)
	}
	return cons, nil
}
