package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// handler acts on one command: create, reply, then ack or nak.
type handler struct {
	nc      *nats.Conn
	creator *creator
	log     *slog.Logger
}

// handle acks a command only once its result is stored and replied. The
// reply goes first on the same connection, so the broker sees it first.
// A result that is not final is nak'ed, to be redelivered after a delay.
func (h *handler) handle(ctx context.Context, msg jetstream.Msg) {
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	log := h.log.With("subject", msg.Subject(), "seq", seq)
	principal, ok := principalOf(msg.Subject())
	if !ok {
		log.Error("a command whose subject names no principal is dropped")
		h.settle(log, msg.Term()) // with no reason: older servers take none
		return
	}
	cmd, refused := parseCommand(msg.Headers(), msg.Data())
	o := outcome{status: refused}
	if refused == nil {
		o = h.creator.create(ctx, principal, cmd)
	}
	log = log.With("key", cmd.key)
	if o.retry > 0 {
		log.Warn("not final; redelivery asked", "after", o.retry.String(), "why", o.why)
		h.settle(log, msg.NakWithDelay(o.retry))
		return
	}
	if err := reply(h.nc, principal, cmd.key, seq, o); err != nil {
		log.Warn("reply failed; redelivery asked", "err", err)
		h.settle(log, msg.NakWithDelay(h.creator.retry))
		return
	}
	log.Debug("done", "code", codeOf(o), "replayed", o.replayed)
	h.settle(log, msg.Ack())
}

// settle logs an ack or nak the broker was not sent. It redelivers the
// command after its AckWait.
func (h *handler) settle(log *slog.Logger, err error) {
	if err != nil {
		log.Warn("ack or nak not sent; the broker redelivers after AckWait", "err", err)
	}
}

// codeOf names an outcome's code, for the log.
func codeOf(o outcome) string {
	if o.status == nil {
		return "OK"
	}
	return statusName(o.status.Code)
}
