package main

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// reply publishes a final outcome to payments.replies.<principal>. Its body
// is the response, or the error status, in protojson. Its headers name the
// key, the code, the command's sequence, and a replay.
func reply(nc *nats.Conn, principal, key string, seq uint64, o outcome) error {
	var body proto.Message = o.resp
	codeName := codeOf(o)
	if o.status != nil {
		body = o.status
	}
	data, err := protojson.Marshal(body)
	if err != nil {
		return err
	}
	m := nats.NewMsg(replyPrefix + principal)
	m.Data = data
	if key != "" {
		m.Header.Set(keyHeader, key)
	}
	m.Header.Set(statusHeader, codeName)
	m.Header.Set(commandHeader, strconv.FormatUint(seq, 10))
	if o.replayed {
		m.Header.Set(replayHeader, "true")
	}
	return nc.PublishMsg(m)
}

// statusName is a code's name, as google.rpc.Code spells it.
func statusName(c int32) string { return code.Code(c).String() }
