package main

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A request that does not decode (bytes that are not a message, a string
// that is not UTF-8) is the caller's fault, but grpc-go answers INTERNAL for
// any codec error. requestCodec answers INVALID_ARGUMENT instead: for the
// request types of the unary methods it is given, it reports the failure
// to rejectUndecodable, the first interceptor, through a side table keyed
// by the message, and lets the call reach it. Other messages (streams of
// reflection and health) fail in the codec as usual, so nothing is left in
// the table.
type requestCodec struct {
	encoding.CodecV2
	requests map[protoreflect.FullName]bool
	failed   sync.Map // message -> its decoding error
}

// newRequestCodec serves the unary methods of the named services.
func newRequestCodec(services ...protoreflect.FullName) *requestCodec {
	c := &requestCodec{CodecV2: encoding.GetCodecV2("proto"), requests: map[protoreflect.FullName]bool{}}
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

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if m, ok := v.(interface{ ProtoReflect() protoreflect.Message }); err != nil && ok &&
		c.requests[m.ProtoReflect().Descriptor().FullName()] {
		c.failed.Store(v, err)
		return nil
	}
	return err
}

// rejectUndecodable answers INVALID_ARGUMENT for a request that did not
// decode, before any other interceptor sees it: no key is used up.
func (c *requestCodec) rejectUndecodable(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err, ok := c.failed.LoadAndDelete(req); ok {
		return nil, status.Errorf(codes.InvalidArgument, "the request is not a valid %s: %v",
			req.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect().Descriptor().FullName(), err)
	}
	return handler(ctx, req)
}
