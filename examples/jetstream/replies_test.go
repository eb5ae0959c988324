package main

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsd/paymentsd/daemon/testkit/natstest"
)

// gotReply is one reply, as the reply stream kept it.
type gotReply struct {
	ownedKey
	command  uint64 // the command's stream sequence
	code     string
	replayed bool
	body     []byte
}

// replies collects the reply stream in order, from its start.
type replies struct {
	mu    sync.Mutex
	all   []gotReply
	bySeq map[uint64][]gotReply
	byKey map[ownedKey][]gotReply
}

// collectReplies reads the reply stream through an ordered consumer.
func collectReplies(t testing.TB, js jetstream.JetStream) *replies {
	t.Helper()
	r := &replies{bySeq: map[uint64][]gotReply{}, byKey: map[ownedKey][]gotReply{}}
	cons, err := js.OrderedConsumer(context.Background(), natstest.ReplyStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get(commandHeader), 10, 64)
		g := gotReply{ownedKey: ownedKey{principal: strings.TrimPrefix(m.Subject(), replyPrefix), key: h.Get(keyHeader)},
			command: seq, code: h.Get(statusHeader), replayed: h.Get(replayHeader) == "true", body: m.Data()}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.all = append(r.all, g)
		r.bySeq[seq] = append(r.bySeq[seq], g)
		r.byKey[g.ownedKey] = append(r.byKey[g.ownedKey], g)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return r
}

// count is how many replies were read.
func (r *replies) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// answered reports whether k has a reply.
func (r *replies) answered(k ownedKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byKey[k]) > 0
}

// unanswered counts the commands with no reply yet.
func (r *replies) unanswered(sent []sentCommand) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range sent {
		if len(r.bySeq[c.seq]) == 0 {
			n++
		}
	}
	return n
}
