package boltstore

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/once"
)

// BenchmarkDo measures once.Do on a bbolt file: a fresh key (a claim and a
// completion, each a commit of the group commit, one writer) and a
// replay of a stored one. Run with
//
//	go test -run '^$' -bench BenchmarkDo -benchmem ./boltstore
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	body := wrapperspb.Bytes(make([]byte, 100))
	reply := wrapperspb.Bytes(make([]byte, 300))
	fn := func(context.Context) (*wrapperspb.BytesValue, error) { return reply, nil }
	request := func(key string, transactional bool) once.Request {
		return once.Request{Scope: "bench", Key: key, Operation: "/bench.v1.Bench/Do", Message: body, Transactional: transactional}
	}
	for _, transactional := range []bool{false, true} {
		b.Run(fmt.Sprintf("Fresh/transactional=%t", transactional), func(b *testing.B) {
			g, err := once.New(openBench(b), once.Options{})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, _, err := once.Do(ctx, g, request(fmt.Sprint("key-", i), transactional), fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Replay", func(b *testing.B) {
		g, err := once.New(openBench(b), once.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := once.Do(ctx, g, request("key", false), fn); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := once.Do(ctx, g, request("key", false), fn); err != nil {
				b.Fatal(err)
			}
		}
	})
}
