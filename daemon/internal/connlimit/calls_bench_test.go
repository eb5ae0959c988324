package connlimit

import (
	"context"
	"testing"
)

// BenchmarkCalls is what the call bound adds to one call: its admission,
// its handling mark, and its release when the stream ends.
func BenchmarkCalls(b *testing.B) {
	c := NewCalls(1<<30, unread, nil, refusals()) // releases run in goroutines of their own, behind the loop
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			parent, end := context.WithCancel(context.Background())
			ctx, err := c.Tap(parent, nil)
			if err != nil {
				b.Fatal(err)
			}
			c.Handled(ctx)
			end()
		}
	})
}

// BenchmarkFrameScanner is what timing header blocks adds per byte read:
// a create's frames, the preface aside.
func BenchmarkFrameScanner(b *testing.B) {
	frames := concat(frame(frameHeaders, flagEndHeaders, 120), frame(0x0, 1, 230), frame(0x8, 0, 4), frame(0x6, 0, 8))
	s := frameScanner{preface: len(clientPreface)}
	b.SetBytes(int64(len(frames)))
	for b.Loop() {
		s.scan(frames)
	}
}
