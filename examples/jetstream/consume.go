package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// consume hands each command to a worker, up to workers at once, until ctx
// ends. It then handles the commands already buffered, and waits for them.
func consume(ctx context.Context, cons jetstream.Consumer, h *handler, workers, fetch int, log *slog.Logger) error {
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	// A command begun runs to its end: a signal stops the intake only.
	work := context.WithoutCancel(ctx)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			h.handle(work, msg)
		}()
	}, jetstream.PullMaxMessages(fetch), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		log.Warn("consume", "err", err)
	}))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	wg.Wait()
	return nil
}
