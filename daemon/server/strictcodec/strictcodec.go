// Package strictcodec answers INVALID_ARGUMENT, not INTERNAL, for a
// request that does not decode. It knows gRPC and protobuf, nothing of
// payments or idempotency.
package strictcodec

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Codec answers INVALID_ARGUMENT for a request that does not decode.
// Bytes that are not a message, or a string that is not UTF-8, are the
// caller's fault. Yet grpc-go answers INTERNAL for any codec error.
// Codec acts on the request types of the unary methods it is given.
// It empties such a message that does not decode. It marks the message
// with the error, in an unknown field of the highest number. The call then
// reaches Reject, an interceptor. The mark lives and dies with the
// message. So nothing is left behind by a call that ends before its
// interceptors run. Other messages (streams of reflection and health) fail
// in the codec as usual.
type Codec struct {
	encoding.CodecV2
	requests map[protoreflect.FullName]bool
}

// undecodableField numbers the mark. A client may send that field itself,
// as bytes and first among the fields the message does not know. It is
// then told its request is invalid. Sent anywhere else, the field is an
// unknown field like any other, left to the service.
const undecodableField = protowire.MaxValidNumber

// New serves the unary methods of the named services. They must be
// compiled into the binary, or New panics. Pass the codec to
// grpc.ForceServerCodecV2, and put Reject among the interceptors.
func New(services ...protoreflect.FullName) *Codec {
	c := &Codec{CodecV2: encoding.GetCodecV2("proto"), requests: map[protoreflect.FullName]bool{}}
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			panic(err) // a service compiled into the binary
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			if m := methods.Get(i); !m.IsStreamingClient() && !m.IsStreamingServer() {
				c.requests[m.Input().FullName()] = true
			}
		}
	}
	return c
}

// Unmarshal decodes data into v, or marks v as undecodable.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if m, ok := v.(proto.Message); err != nil && ok && c.requests[m.ProtoReflect().Descriptor().FullName()] {
		proto.Reset(m)
		mark := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
		m.ProtoReflect().SetUnknown(protowire.AppendString(mark, err.Error()))
		return nil
	}
	return err
}

// Reject answers INVALID_ARGUMENT for a request that did not decode.
// Put it after the interceptors that only observe. Put it before those
// that act on a request, such as the idempotency interceptor, so that no
// key is used up.
func Reject(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if unknown := m.ProtoReflect().GetUnknown(); len(unknown) > 0 {
			if num, typ, n := protowire.ConsumeTag(unknown); num == undecodableField && typ == protowire.BytesType {
				if cause, m2 := protowire.ConsumeString(unknown[n:]); m2 >= 0 {
					return nil, status.Errorf(codes.InvalidArgument, "the request is not a valid %s: %s",
						m.ProtoReflect().Descriptor().FullName(), cause)
				}
			}
		}
	}
	return handler(ctx, req)
}
