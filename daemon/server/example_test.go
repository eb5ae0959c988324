package server_test

import (
	"context"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor/retry"
)

// A client creates a payment intent through the retry interceptor, which
// gives the call a key and keeps it across the call's retries: one
// intent, however the network behaves. The body is the code of
// docs/embedding.md, section "The client half": a test at the
// repository's root holds the two alike. It is compiled, not run: it
// needs a paymentsd listening.
func Example_retryingClient() {
	retrying, err := retry.UnaryClientInterceptor( // an error without methods, or for a malformed name
		retry.WithMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
		retry.WithMaxAttempts(5),                              // default 5
		retry.WithBackoff(50*time.Millisecond, 2*time.Second), // the defaults
		retry.WithAttemptTimeout(3*time.Second),               // default: none
	)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("localhost:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retrying /* first: outside any other retry interceptor */))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := paymentsv1.NewPaymentIntentServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer merchant-demo")
	var key string
	resp, err := client.CreatePaymentIntent(ctx, &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           "100000000",
		ExpiresInSeconds: 900,
	}, retry.ChosenKey(&key)) // one intent, however the network behaves
	if err != nil {
		log.Fatalf("create %s: %v", key, err) // the key names the call to the server's operators
	}
	log.Printf("create %s: intent %s", key, resp.GetPaymentIntent().GetId())
}
