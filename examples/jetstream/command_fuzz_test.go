package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// FuzzParseCommand sends a message's subject, key headers and body through
// the consumer's parsers. A subject yields a principal only when it is one
// token that names a valid principal. A command is read exactly when its
// key passes the key rule and protojson reads its body; anything else is
// INVALID_ARGUMENT, and a refused body never reaches the create.
//
//	go test -run '^$' -fuzz '^FuzzParseCommand$' -fuzztime 10m ./examples/jetstream
func FuzzParseCommand(f *testing.F) {
	f.Add("payments.create.alice", "order-1", "", `{"chain":"evm:31337","amount":"100"}`)
	f.Add("payments.create.a.b", "k", "k", `{}`)
	f.Add("payments.create.", " padded", "", `{"amount":1}`)
	f.Add("payments.createalice", "\"quoted", "", `not json`)
	f.Fuzz(func(t *testing.T, subject, key, second, body string) {
		if p, ok := principalOf(subject); ok && (strings.Contains(p, ".") || !auth.ValidPrincipal(p) || createPrefix+p != subject) {
			t.Fatalf("principalOf(%q) = %q, true: not one valid token", subject, p)
		}
		h := nats.Header{}
		if key != "" {
			h.Add(keyHeader, key)
		}
		if second != "" {
			h.Add(strings.ToLower(keyHeader), second)
		}
		cmd, st := parseCommand(h, []byte(body))
		want := &paymentsv1.CreatePaymentIntentRequest{}
		bodyOK := protojson.Unmarshal([]byte(body), want) == nil
		var sent []string
		for _, v := range []string{key, second} {
			if v != "" {
				sent = append(sent, v)
			}
		}
		keyOK := len(sent) == 1 && wire.ValidateKey(sent[0]) == nil
		switch {
		case st != nil && code.Code(st.Code) != code.Code_INVALID_ARGUMENT:
			t.Fatalf("refused with %v, want INVALID_ARGUMENT", code.Code(st.Code))
		case st != nil && keyOK && bodyOK:
			t.Fatalf("a valid key %q and body %q refused: %v", key, body, st)
		case st == nil && !(keyOK && bodyOK):
			t.Fatalf("key %q, %q and body %q read as a command", key, second, body)
		case st == nil && (cmd.key != sent[0] || !proto.Equal(cmd.req, want)):
			t.Fatalf("command %q %v, want %q %v", cmd.key, cmd.req, sent[0], want)
		case st != nil && cmd.req != nil:
			t.Fatal("a refused command carries a request")
		}
	})
}
