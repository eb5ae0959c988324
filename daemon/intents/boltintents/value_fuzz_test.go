package boltintents

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/internal/sealed"
)

// FuzzParseValue feeds an intent's stored payload, as a damaged file might
// hold it, to its parser: it never panics, and an intent it accepts has an
// owner and stores again, under its owner and key, as a payload that
// parses to the same owner, key and intent.
func FuzzParseValue(f *testing.F) {
	pi := intent("pi_0123456789abcdef01234567", "100")
	for _, key := range []string{"order-1", ""} {
		v, err := encodeIntent("alice", key, pi)
		if err != nil {
			f.Fatal(err)
		}
		payload, err := sealed.Open([]byte(pi.Id), v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload)
	}
	b, _ := proto.Marshal(pi)
	f.Add(append(ownerPrefix("alice"), b...)) // as a build before keys stored it
	f.Add([]byte{keyedMark})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseValue(pi.Id, b)
		if err != nil {
			return
		}
		if v.owner == "" || v.intent == nil {
			t.Fatalf("%x: parsed with owner %q, intent %v", b, v.owner, v.intent)
		}
		stored, err := encodeIntent(v.owner, v.key, v.intent)
		if err != nil {
			t.Fatalf("%x: parsed, but does not encode: %v", b, err)
		}
		payload, err := sealed.Open([]byte(v.intent.Id), stored)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseValue(v.intent.Id, payload)
		if err != nil || again.owner != v.owner || again.key != v.key || !proto.Equal(again.intent, v.intent) {
			t.Fatalf("%x: parsed %q %q %v, stored and parsed again %+v (%v)", b, v.owner, v.key, v.intent, again, err)
		}
	})
}
