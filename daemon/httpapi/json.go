package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonMarshaler is the gateway's JSON. Field names are snake_case, as in
// the seed's API. Every field of a message is written, zero values and
// empty lists included, so that a client sees the whole shape. Enum values
// go by their proto names (STATE_CREATED). An int64 is a string, as the
// proto3 JSON mapping says. Requests may use either spelling of a field
// name. Unknown fields and anything after the JSON value are refused.
type jsonMarshaler struct{}

var (
	marshalOptions   = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}
	unmarshalOptions = protojson.UnmarshalOptions{}
)

// marshalCompact encodes m with o, with no whitespace. The spacing of
// protojson varies from build to build on purpose. Answers, replays above
// all, should be the same bytes whichever build sends them.
func marshalCompact(o protojson.MarshalOptions, m proto.Message) ([]byte, error) {
	b, err := o.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (jsonMarshaler) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("httpapi: cannot encode %T, not a proto message", v)
	}
	return marshalCompact(marshalOptions, m)
}

func (jsonMarshaler) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("httpapi: cannot decode into %T, not a proto message", v)
	}
	if err := unmarshalOptions.Unmarshal(data, m); err != nil {
		return decodeError(data, m.ProtoReflect().Descriptor())
	}
	return nil
}

// NewDecoder reads the whole body, which the handler has already limited
// and buffered. An empty body decodes as io.EOF, which the gateway takes
// for an empty request.
func (j jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return io.EOF
		}
		return j.Unmarshal(data, v)
	})
}

func (j jsonMarshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := j.Marshal(v)
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	})
}

func (jsonMarshaler) ContentType(any) string { return "application/json" }
