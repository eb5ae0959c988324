package interceptor

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Codec returns a server codec that sends a response the interceptor
// answers with WithStoredBytes as the bytes its record holds, and hands
// every other message to base. Pass it to grpc.ForceServerCodecV2, as
// grpc.ForceServerCodecV2(interceptor.Codec(encoding.GetCodecV2("proto"))).
//
// A response is then encoded once, for its record, not again for the
// wire, and a replay is sent without being decoded. Every answer to a key
// is thus the same bytes, the first one included.
//
// A protobuf message over 32 KiB is encoded into a buffer of its own size.
// grpc-go's pool has no size between 32 KiB and 1 MiB, so a page of 200
// KB would hold a 1 MiB buffer for as long as its answer waits to be
// written, which is as long as its client does not read.
func Codec(base encoding.CodecV2) encoding.CodecV2 { return storedBytesCodec{base} }

type storedBytesCodec struct{ encoding.CodecV2 }

// largeMessage is the size past which a message gets a buffer of its own
// size rather than one of the pool's.
const largeMessage = 32 << 10

func (c storedBytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*StoredResponse); ok {
		// The bytes are the record's, shared and never written to: a
		// SliceBuffer is not freed into a pool.
		return mem.BufferSlice{mem.SliceBuffer(r.any.Value)}, nil
	}
	if m, ok := v.(proto.Message); ok {
		// The size computed here is the one Marshal uses.
		if size := proto.Size(m); size > largeMessage {
			b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
			return mem.BufferSlice{mem.SliceBuffer(b)}, err
		}
	}
	return c.CodecV2.Marshal(v)
}

// StoredResponse is what a handler's call returns under WithStoredBytes:
// the response as its record stores it. Only Codec can send it. An
// interceptor outside this one that needs the message decodes it with
// Message.
type StoredResponse struct{ any *anypb.Any }

// Message decodes the response.
func (r *StoredResponse) Message() (any, error) { return r.any.UnmarshalNew() }

// Encoded is the response's type URL and its bytes, as the record holds
// them, for an interceptor outside that reads a field without decoding the
// whole. The bytes are shared: read them, never change them.
func (r *StoredResponse) Encoded() (typeURL string, b []byte) { return r.any.TypeUrl, r.any.Value }
