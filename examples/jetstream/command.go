package main

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// Subjects and headers of the commands and their replies.
const (
	createPrefix  = "payments.create."
	replyPrefix   = "payments.replies."
	keyHeader     = "Idempotency-Key"
	replayHeader  = "Idempotent-Replayed"
	statusHeader  = "Status-Code"      // the reply's code: OK, or the status's
	commandHeader = "Command-Sequence" // the command's stream sequence
)

// operation names a create on every route, so a key means the same there.
const operation = paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName

// principalOf is the subject's last token, which the broker binds to the
// publishing user. ok is false for a subject of another form. A token is a
// principal's name without dots, so it is one token.
func principalOf(subject string) (string, bool) {
	p, ok := strings.CutPrefix(subject, createPrefix)
	return p, ok && !strings.Contains(p, ".") && auth.ValidPrincipal(p)
}

// command is a create as a message asks for it.
type command struct {
	key string
	req *paymentsv1.CreatePaymentIntentRequest
}

// parseCommand reads a message's key and body. A message that cannot be
// read is refused for good, with the status to reply.
func parseCommand(h nats.Header, body []byte) (command, *spb.Status) {
	var keys []string
	for name, vs := range h {
		if strings.EqualFold(name, keyHeader) {
			keys = append(keys, vs...)
		}
	}
	switch {
	case len(keys) == 0:
		return command{}, refusal(code.Code_INVALID_ARGUMENT, wire.ReasonKeyMissing, "a create needs an Idempotency-Key header")
	case len(keys) > 1:
		return command{}, refusal(code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid,
			fmt.Sprintf("invalid Idempotency-Key: sent %d times; send exactly one", len(keys)))
	}
	if err := wire.ValidateKey(keys[0]); err != nil {
		return command{}, refusal(code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid, "invalid Idempotency-Key: "+err.Error())
	}
	req := &paymentsv1.CreatePaymentIntentRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		return command{key: keys[0]}, &spb.Status{Code: int32(code.Code_INVALID_ARGUMENT),
			Message: "the body is not a payments.v1.CreatePaymentIntentRequest in protojson: " + err.Error()}
	}
	return command{key: keys[0], req: req}, nil
}

// refusal is a status with an ErrorInfo of the idempotency domain.
func refusal(c code.Code, reason, msg string) *spb.Status {
	info, _ := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain}) // an ErrorInfo always marshals
	return &spb.Status{Code: int32(c), Message: msg, Details: []*anypb.Any{info}}
}
