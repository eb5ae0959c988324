package rpclog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/rpclog"
	"github.com/paymentsd/paymentsd/daemon/testkit/grpctest"
	"github.com/paymentsd/paymentsd/daemon/testkit/logbuf"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/wire"
)

// payments answers GetPaymentIntent: the error wanted for the id "fail",
// the intent otherwise.
type payments struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	fail error
}

func (p payments) GetPaymentIntent(_ context.Context, req *paymentsv1.GetPaymentIntentRequest) (*paymentsv1.GetPaymentIntentResponse, error) {
	if req.Id == "fail" {
		return nil, p.fail
	}
	return &paymentsv1.GetPaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: req.Id}}, nil
}

// serve runs the service behind Interceptor and the idempotency
// interceptor, which takes a key of GetPaymentIntent here, and
// returns a client of it and its log.
func serve(t *testing.T, p payments) (paymentsv1.PaymentIntentServiceClient, *logbuf.Buffer) {
	t.Helper()
	log := &logbuf.Buffer{}
	idem := interceptor.MustUnaryServerInterceptor(memstore.New(),
		interceptor.WithScope(func(context.Context) (string, error) { return "merchant", nil }),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, interceptor.KeyOptional),
		interceptor.WithObserver(rpclog.Observer{}),
	)
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(rpclog.Interceptor(slog.New(slog.NewJSONHandler(log, nil))), idem))
	paymentsv1.RegisterPaymentIntentServiceServer(s, p)
	return paymentsv1.NewPaymentIntentServiceClient(grpctest.Serve(t, s)), log
}

func get(c paymentsv1.PaymentIntentServiceClient, key, id string) error {
	ctx := context.Background()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.KeyHeader, key)
	}
	_, err := c.GetPaymentIntent(ctx, &paymentsv1.GetPaymentIntentRequest{Id: id})
	return err
}

// Each call logs one line with the interceptor's decision, if it made one.
func TestInterceptor_LogsTheOutcome(t *testing.T) {
	c, log := serve(t, payments{})
	for range 2 {
		if err := get(c, "k-1", "pi_1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := get(c, "", "pi_1"); err != nil {
		t.Fatal(err)
	}
	lines := log.Lines(t)
	want := []string{"fresh 1 OK", "replay 1 OK", "<nil> <nil> OK"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d: %v", len(lines), len(want), lines)
	}
	for i, l := range lines {
		if got := fmt.Sprint(l["idempotency"], " ", l["attempt"], " ", l["code"]); got != want[i] {
			t.Errorf("line %d: got %q, want %q (%v)", i, got, want[i], l)
		}
		if l["msg"] != "rpc" || l["method"] != paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName || l["duration_ms"] == nil {
			t.Errorf("line %d: %v, want msg rpc, the method and a duration", i, l)
		}
		if l["err"] != nil {
			t.Errorf("line %d: err %v, want none", i, l["err"])
		}
	}
}

// A wrapped error's cause is logged, which its caller does not see; a
// plain status is not repeated.
func TestInterceptor_LogsAWrappedCause(t *testing.T) {
	cause := fmt.Errorf("disk full: %w", errors.New("ENOSPC"))
	for _, c := range []struct {
		err     error
		wantErr any
	}{
		{cause, "disk full: ENOSPC"},
		{status.Error(codes.NotFound, "no such intent"), nil},
	} {
		client, log := serve(t, payments{fail: c.err})
		get(client, "", "fail") // no key: the handler's error reaches the log as it is
		if lines := log.Lines(t); len(lines) != 1 || lines[0]["err"] != c.wantErr {
			t.Errorf("%v: got %v, want one line with err %v", c.err, lines, c.wantErr)
		}
	}
}

// A call's valid x-request-id is logged, so that an HTTP request's line
// and its call's are found together; an invalid one is not.
func TestInterceptor_LogsTheRequestID(t *testing.T) {
	c, log := serve(t, payments{})
	for _, id := range []string{"req-1", "bad id"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", id)
		if _, err := c.GetPaymentIntent(ctx, &paymentsv1.GetPaymentIntentRequest{Id: "pi_1"}); err != nil {
			t.Fatal(err)
		}
	}
	lines := log.Lines(t)
	if len(lines) != 2 || lines[0]["request_id"] != "req-1" || lines[1]["request_id"] != nil {
		t.Errorf("lines %v, want request_id req-1, then none", lines)
	}
	if lines[0]["trace_id"] != nil {
		t.Errorf("trace_id %v without a span", lines[0]["trace_id"])
	}
}

// A keyed call's line names the key as sent, the intent answered and,
// for a refusal, its reason; a call without a principal names none.
func TestInterceptor_LogsTheKeyTheIntentAndTheReason(t *testing.T) {
	c, log := serve(t, payments{})
	if err := get(c, "order-100", "pi_1"); err != nil {
		t.Fatal(err)
	}
	if err := get(c, "order-100", "pi_2"); status.Code(err) == codes.OK {
		t.Fatal("the key reused for another request was answered")
	}
	lines := log.Lines(t)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %v", len(lines), lines)
	}
	want := []string{"order-100 fresh pi_1 <nil>", "order-100 mismatch pi_2 IDEMPOTENCY_KEY_REUSED"}
	for i, l := range lines {
		if got := fmt.Sprint(l["idempotency_key"], " ", l["idempotency"], " ", l["intent_id"], " ", l["reason"]); got != want[i] {
			t.Errorf("line %d: got %q, want %q (%v)", i, got, want[i], l)
		}
		if l["principal_hash"] != nil || l["via"] != nil {
			t.Errorf("line %d: %v, want no principal (no Identified) and no via", i, l)
		}
	}
}

// Identified, after the authenticating interceptor, puts the principal's
// hash on the line, never the principal.
func TestIdentified_LogsThePrincipalsHash(t *testing.T) {
	log := &logbuf.Buffer{}
	authenticate := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(auth.NewContext(ctx, "dev:alice"), req)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(rpclog.Interceptor(slog.New(slog.NewJSONHandler(log, nil))), authenticate, rpclog.Identified))
	paymentsv1.RegisterPaymentIntentServiceServer(s, payments{})
	if err := get(paymentsv1.NewPaymentIntentServiceClient(grpctest.Serve(t, s)), "", "pi_1"); err != nil {
		t.Fatal(err)
	}
	lines := log.Lines(t)
	if len(lines) != 1 || lines[0]["principal_hash"] != auth.PrincipalHash("dev:alice") {
		t.Fatalf("lines %v, want one with principal_hash %s", lines, auth.PrincipalHash("dev:alice"))
	}
	if strings.Contains(fmt.Sprint(lines), "alice") {
		t.Errorf("the principal's name is logged: %v", lines)
	}
}
