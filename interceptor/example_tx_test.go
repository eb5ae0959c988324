package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
)

// orders is some other team's service; its only effect is the order it
// stores, beside the idempotency records, in the same bbolt file.
type orders struct {
	testgrpc.UnimplementedTestServiceServer
	store  *boltstore.DB
	placed atomic.Int64
}

func (s *orders) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	order := fmt.Sprintf("order-%d", s.placed.Add(1))
	err := s.store.Update(ctx, func(tx *bolt.Tx) error { // staged under the interceptor
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return b.Put([]byte(order), []byte("placed"))
	})
	if err != nil {
		return nil, status.Error(codes.Unavailable, "orders storage is unavailable")
	}
	return &testgrpc.SimpleResponse{Username: order}, nil
}

// A transactional method writes its data through store.Update: inside the
// handler, the write is staged and commits in the same transaction as the
// request's idempotency record, so the order and the answer naming it are
// stored together, or neither is. A retry with the same key is answered
// from the record and writes no second order.
func ExampleWithTransactional() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	store, err := boltstore.Open(filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor.MustUnaryServerInterceptor(store,
		interceptor.WithKeyPolicy(testgrpc.TestService_UnaryCall_FullMethodName, interceptor.KeyRequired),
		interceptor.WithTransactional(testgrpc.TestService_UnaryCall_FullMethodName),
	)))
	testgrpc.RegisterTestServiceServer(srv, &orders{store: store})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	answers := map[string][]string{}
	for _, key := range []string{"cart-1", "cart-1", "cart-2"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(),
			"authorization", "Bearer some-token", "idempotency-key", key)
		var header metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key, resp.Username, "replayed:", header.Get("idempotent-replayed"))
		answers[key] = append(answers[key], resp.Username)
	}
	fmt.Println("cart-1 answered the same twice:", answers["cart-1"][0] == answers["cart-1"][1])

	var stored []string
	if err := store.View(context.Background(), func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("orders")).ForEach(func(k, v []byte) error {
			stored = append(stored, string(k))
			return nil
		})
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders stored:", len(stored), stored)
	// Output:
	// cart-1 order-1 replayed: []
	// cart-1 order-1 replayed: [true]
	// cart-2 order-2 replayed: []
	// cart-1 answered the same twice: true
	// orders stored: 2 [order-1 order-2]
}
