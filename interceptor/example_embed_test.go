package interceptor_test

import (
	"context"
	"log"
	"time"

	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/tracing"
	"github.com/paymentsd/paymentsd/storage"
)

// The imports and the body of this example are the code of
// docs/embedding.md, section "Embedding the interceptor": a test at the
// repository's root holds the two alike. It is compiled, not run: it
// serves until the process ends.

// Embed the interceptor in a gRPC server of your own: a store and its
// sweeper, a key policy per method, and the interceptor after your
// authentication.
func ExampleUnaryServerInterceptor() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the sweeper

	store, err := boltstore.Open("data/shop.db", nil) // or boltstore.New(yourBoltDB, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	go storage.RunSweeper(ctx, store, time.Minute, nil) // deletes expired records

	idem, err := interceptor.UnaryServerInterceptor(store,
		interceptor.WithKeyPolicy("/shop.v1.Orders/PlaceOrder", interceptor.KeyRequired),
		interceptor.WithKeyPolicy("/shop.v1.Orders/GetOrder", interceptor.KeyIgnored),
		interceptor.WithTransactional("/shop.v1.Orders/PlaceOrder"), // its only effect: the order it stores
		interceptor.WithLease(30*time.Second),
		interceptor.WithTTL(24*time.Hour),
		interceptor.WithObserver(tracing.Observer{}), // optional: outcomes on the request's OpenTelemetry span
	)
	if err != nil { // a method not named "/package.Service/Method", a lease not shorter than the TTL
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		yourAuthInterceptor, // required: the default scope keys by the bearer token, so something must check it
		idem,                // after authentication, before anything that rewrites statuses
	))
	log.Fatal(srv.Serve(yourListener)) // once your services are registered on srv
}
