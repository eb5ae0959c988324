package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
)

// charges is some other team's service with a side effect to run once.
type charges struct {
	testgrpc.UnimplementedTestServiceServer
	runs int
}

func (c *charges) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	c.runs++
	return &testgrpc.SimpleResponse{Username: fmt.Sprintf("charge #%d", c.runs)}, nil
}

// Embed the interceptor in any gRPC server: give it a store and say which
// methods require a key.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	store, err := boltstore.Open(filepath.Join(dir, "idempotency.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor.MustUnaryServerInterceptor(store,
		interceptor.WithKeyPolicy(testgrpc.TestService_UnaryCall_FullMethodName, interceptor.KeyRequired),
	)))
	service := &charges{}
	testgrpc.RegisterTestServiceServer(srv, service)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer some-token", "idempotency-key", "charge-42")
	for range 2 {
		var header metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.Username, "replayed:", header.Get("idempotent-replayed"))
	}
	fmt.Println("handler runs:", service.runs)
	// Output:
	// charge #1 replayed: []
	// charge #1 replayed: [true]
	// handler runs: 1
}
