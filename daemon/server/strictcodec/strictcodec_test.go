package strictcodec_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server/strictcodec"
	"github.com/paymentsd/paymentsd/daemon/testkit/grpctest"
)

// payments answers GetPaymentIntent with the id asked for, counting calls.
type payments struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	calls int
}

func (p *payments) GetPaymentIntent(_ context.Context, req *paymentsv1.GetPaymentIntentRequest) (*paymentsv1.GetPaymentIntentResponse, error) {
	p.calls++
	return &paymentsv1.GetPaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: req.Id}}, nil
}

// rawCodec sends a request's bytes as they are, valid or not.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// serve runs a gRPC server with the codec and returns a connection to it
// that sends raw bytes.
func serve(t *testing.T, p *payments) *grpc.ClientConn {
	codec := strictcodec.New(protoreflect.FullName(paymentsv1.PaymentIntentService_ServiceDesc.ServiceName))
	s := grpc.NewServer(grpc.ForceServerCodecV2(codec), grpc.ChainUnaryInterceptor(strictcodec.Reject))
	paymentsv1.RegisterPaymentIntentServiceServer(s, p)
	healthpb.RegisterHealthServer(s, health.NewServer())
	return grpctest.Serve(t, s, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
}

func TestCodec(t *testing.T) {
	valid, _ := proto.Marshal(&paymentsv1.GetPaymentIntentRequest{Id: "pi_1"})
	cases := []struct {
		name     string
		method   string
		req      []byte
		wantCode codes.Code
		wantMsg  string
	}{
		{"valid", paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, valid, codes.OK, ""},
		{"not a message", paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, []byte{0xff, 0xff},
			codes.InvalidArgument, "the request is not a valid payments.v1.GetPaymentIntentRequest: "},
		{"string not UTF-8", paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, []byte{0x0a, 0x01, 0xff},
			codes.InvalidArgument, "the request is not a valid payments.v1.GetPaymentIntentRequest: "},
		{"another service's request fails as grpc-go fails it", healthpb.Health_Check_FullMethodName, []byte{0xff, 0xff},
			codes.Internal, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &payments{}
			conn := serve(t, p)
			var resp paymentsv1.GetPaymentIntentResponse
			err := conn.Invoke(context.Background(), c.method, c.req, &resp)
			st := status.Convert(err)
			if st.Code() != c.wantCode || !strings.HasPrefix(st.Message(), c.wantMsg) {
				t.Fatalf("got %v %q, want %v %q...", st.Code(), st.Message(), c.wantCode, c.wantMsg)
			}
			if wantCalls := map[bool]int{true: 1, false: 0}[c.wantCode == codes.OK]; p.calls != wantCalls {
				t.Errorf("handler ran %d times, want %d", p.calls, wantCalls)
			}
			if c.wantCode == codes.OK && resp.PaymentIntent.GetId() != "pi_1" {
				t.Errorf("got %v, want the intent pi_1", &resp)
			}
		})
	}
}

// A client that sends the mark's field itself is refused before the
// handler: the field number is the highest valid one, which no request
// of the API uses.
func TestCodec_MarkSentByTheClient_Refused(t *testing.T) {
	p := &payments{}
	conn := serve(t, p)
	req, _ := proto.Marshal(&paymentsv1.GetPaymentIntentRequest{Id: "pi_1"})
	req = protowire.AppendString(protowire.AppendTag(req, protowire.MaxValidNumber, protowire.BytesType), "hi")
	var resp paymentsv1.GetPaymentIntentResponse
	err := conn.Invoke(context.Background(), paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, req, &resp)
	if status.Code(err) != codes.InvalidArgument || p.calls != 0 {
		t.Fatalf("got %v after %d calls, want INVALID_ARGUMENT and no call", err, p.calls)
	}
}
