package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connect connects to NATS as the consumer's own user.
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
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return nc, nil
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
