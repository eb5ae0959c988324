package strictcodec_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server/strictcodec"
)

// FuzzCodec_RequestsAsProtobufReadsThem decodes bytes as each request of
// the payments service, as a server with Codec and Reject does: the codec
// never fails a request (grpc-go would answer INTERNAL), and Reject then
// answers INVALID_ARGUMENT exactly when protobuf refuses the bytes, or
// their first unknown field is the mark's; otherwise the handler
// gets the message protobuf reads from them.
func FuzzCodec_RequestsAsProtobufReadsThem(f *testing.F) {
	mark := protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType)
	for _, seed := range [][]byte{
		{}, []byte("\x0a\x04pi_1"), []byte("\x0a\x02\xff\xfe"), []byte("\x0a\x05pi_1"), []byte("\x08"),
		protowire.AppendString(append([]byte(nil), mark...), "forged"), append([]byte("\x0a\x04pi_1"), mark...),
		[]byte("\xfa\xff\xff\xff\x8f\x80\x00\x01x"), // the mark's tag, two bytes longer than it need be
		[]byte("\xa2\x06\x03abc"), []byte("\x0a\x04pi_1\x0a\x04pi_2"),
	} {
		for which := range requests() {
			f.Add(seed, uint8(which))
		}
	}
	c := strictcodec.New("payments.v1.PaymentIntentService")
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		reqs := requests()
		req := reqs[int(which)%len(reqs)]
		want := proto.Clone(req)
		plainErr := proto.Unmarshal(data, want)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, req); err != nil {
			t.Fatalf("%T from %q: the codec failed, %v; a request is marked, never failed", req, data, err)
		}
		var handled proto.Message
		_, err := strictcodec.Reject(context.Background(), req, &grpc.UnaryServerInfo{},
			func(_ context.Context, r any) (any, error) {
				handled = r.(proto.Message)
				return nil, nil
			})
		// The mark is the field numbered MaxValidNumber, of bytes, first
		// among the unknown fields, however its tag is spelled.
		num, typ, n := protowire.ConsumeTag(want.ProtoReflect().GetUnknown())
		marked := plainErr == nil && n > 0 && num == protowire.MaxValidNumber && typ == protowire.BytesType
		switch {
		case plainErr != nil || marked:
			if status.Code(err) != codes.InvalidArgument || handled != nil {
				t.Fatalf("%T from %q (protobuf: %v): Reject said %v and the handler ran: %v", req, data, plainErr, err, handled != nil)
			}
		case err != nil || handled == nil:
			t.Fatalf("%T from %q, which protobuf reads: Reject said %v", req, data, err)
		case !proto.Equal(handled, want):
			t.Fatalf("%T from %q: the handler got %v; protobuf reads %v", req, data, handled, want)
		}
	})
}

// requests are a new message of each request type of the service.
func requests() []proto.Message {
	return []proto.Message{
		&paymentsv1.CreatePaymentIntentRequest{}, &paymentsv1.GetPaymentIntentRequest{},
		&paymentsv1.CancelPaymentIntentRequest{}, &paymentsv1.ListPaymentIntentsRequest{},
	}
}
