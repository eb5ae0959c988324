package main

import (
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/wire"
)

// The scope is the subject's last token, a valid principal, and nothing else.
func TestPrincipalOf(t *testing.T) {
	for subject, want := range map[string]string{
		"payments.create.alice": "alice", "payments.create.": "", "payments.create.a.b": "",
		"payments.cancel.alice": "", "payments.create.a b": "",
	} {
		if got, ok := principalOf(subject); ok != (want != "") || ok && got != want {
			t.Errorf("principalOf(%q) = %q, %t; want %q", subject, got, ok, want)
		}
	}
}

// A command without one valid key is refused for good, as over gRPC. So
// is a body that does not decode.
func TestParseCommand_Refusals(t *testing.T) {
	good := body(1)
	for name, tc := range map[string]struct {
		h      nats.Header
		body   []byte
		code   code.Code
		reason string
	}{
		"no key":        {nats.Header{}, good, code.Code_INVALID_ARGUMENT, wire.ReasonKeyMissing},
		"two keys":      {nats.Header{"Idempotency-Key": {"a", "b"}}, good, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid},
		"two spellings": {nats.Header{"Idempotency-Key": {"a"}, "idempotency-key": {"a"}}, good, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid},
		"quoted key":    {nats.Header{"Idempotency-Key": {`"a"`}}, good, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid},
		"bad body":      {nats.Header{"Idempotency-Key": {"a"}}, []byte("{"), code.Code_INVALID_ARGUMENT, ""},
		"bad field":     {nats.Header{"Idempotency-Key": {"a"}}, []byte(`{"amont":"1"}`), code.Code_INVALID_ARGUMENT, ""},
	} {
		_, st := parseCommand(tc.h, tc.body)
		if st == nil || st.Code != int32(tc.code) || reasonOf(outcome{status: st}) != tc.reason {
			t.Errorf("%s: %v", name, st)
		}
	}
	if cmd, st := parseCommand(nats.Header{"Idempotency-Key": {"order-1"}}, good); st != nil || cmd.key != "order-1" || cmd.req.Amount != "1" {
		t.Errorf("a good command: %+v, %v", cmd, st)
	}
}
