package interceptor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// noticeStore is a memstore whose Watch hands out channels the test closes,
// as a shared store's notices would when a claim ends in another process.
type noticeStore struct {
	*memstore.Store
	mu      sync.Mutex
	watches []chan struct{}
	watched chan struct{} // receives on every Watch
}

func (s *noticeStore) Watch(storage.RecordKey) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.watches = append(s.watches, ch)
	s.mu.Unlock()
	s.watched <- struct{}{}
	return ch, func() {}
}

func (s *noticeStore) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.watches {
		close(ch)
	}
	s.watches = nil
}

// A duplicate of a request running in another process waits on the store's
// notice: once it comes, it claims again and replays the result. Polling is
// made hourly here, so only the notice can wake it before its wait ends.
func TestInFlightWait_WatcherStore_WokenByNoticeNotByPolling(t *testing.T) {
	defer interceptor.SetWatchedPollEvery(time.Hour)()
	store := &noticeStore{Store: memstore.New(), watched: make(chan struct{}, 10)}
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	req := payload("slow")
	ctxWith := func() context.Context {
		ctx := metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer token", wire.KeyHeader, "k"))
		return grpc.NewContextWithServerTransportStream(ctx, transport{})
	}
	// Two processes on one store: "other" runs the request; "here" gets its
	// duplicate and waits for it.
	other := interceptor.MustUnaryServerInterceptor(store.Store)
	here := interceptor.MustUnaryServerInterceptor(store, interceptor.WithInFlightWait(30*time.Second))

	release, running := make(chan struct{}), make(chan struct{})
	otherDone := make(chan error, 1)
	go func() {
		_, err := other(ctxWith(), req, info, func(ctx context.Context, req any) (any, error) {
			close(running)
			<-release
			return &testgrpc.SimpleResponse{Username: "first"}, nil
		})
		otherDone <- err
	}()
	<-running

	type answer struct {
		resp any
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := here(ctxWith(), req, info, func(ctx context.Context, req any) (any, error) {
			t.Error("the duplicate ran the handler")
			return nil, nil
		})
		got <- answer{resp, err}
	}()
	<-store.watched // it is waiting on the notice
	close(release)
	if err := <-otherDone; err != nil {
		t.Fatalf("first call: %v", err)
	}
	store.notify()
	select {
	case a := <-got:
		if a.err != nil || a.resp.(*testgrpc.SimpleResponse).Username != "first" {
			t.Fatalf("duplicate = %v, %v; want the first call's response", a.resp, a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the duplicate was not woken by the notice")
	}
}
