package once_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// The code of these examples is that of docs/embedding.md, section
// "Without gRPC": a test at the repository's root holds the two alike.

// charge is the function to run once: it charges an order and returns the
// charge's id. Its error is stored, so a redelivery gets it back.
func charge(_ context.Context, order string, amount int64) (chargeID string, err error) {
	if amount <= 0 {
		return "", once.Errorf(code.Code_INVALID_ARGUMENT, "amount must be > 0")
	}
	return "ch_" + order, nil
}

// Order is what a message asks to charge. It is fingerprinted as JSON.
type Order struct {
	ID     string
	Amount int64
}

// chargeOnce charges an order at most once per (customer, key). It reports
// whether to ack the message: false asks the broker to redeliver it.
func chargeOnce(ctx context.Context, g *once.Guard, customer, key string, o Order) (ack bool) {
	chargeID, answered, err := once.DoValue(ctx, g,
		once.Request{Scope: customer, Key: key, Operation: "shop.Charge"}, o,
		func(ctx context.Context, o Order) (string, error) { return charge(ctx, o.ID, o.Amount) })
	var refusal *once.Refusal
	switch {
	case errors.As(err, &refusal) && once.Retryable(err): // nothing stored: redeliver
		fmt.Printf("%s: not yet (%v), retry in %v\n", key, refusal.Code(), refusal.RetryDelay())
		return false
	case errors.As(err, &refusal): // such as once.ErrKeyReused: final
		fmt.Printf("%s: refused: %v\n", key, refusal.Reason())
	case err != nil: // charge's own error, stored like a charge id
		fmt.Printf("%s: failed: %v (replayed %t)\n", key, err, answered.Replayed)
	default:
		fmt.Printf("%s: charged %s (replayed %t)\n", key, chargeID, answered.Replayed)
	}
	return true
}

// A consumer runs charge once per key however often a message comes, and
// sweeps the expired records.
func Example_consumer() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the sweeper

	records := memstore.New()                   // or a boltstore.DB or pgstore.DB, shared by the consumers
	g, err := once.New(records, once.Options{}) // one Guard per store and process
	if err != nil {
		log.Fatal(err)
	}
	// A record lives once.DefaultTTL, 24 hours; the sweeper deletes it then.
	go storage.RunSweeper(ctx, records, time.Minute, func(deleted int, err error) {
		log.Printf("swept %d expired records (error: %v)", deleted, err)
	})

	chargeOnce(ctx, g, "alice", "order-1001", Order{ID: "1001", Amount: 250})
	chargeOnce(ctx, g, "alice", "order-1001", Order{ID: "1001", Amount: 250}) // redelivered
	chargeOnce(ctx, g, "alice", "order-1001", Order{ID: "1001", Amount: 999}) // another order, same key
	chargeOnce(ctx, g, "alice", "order-1002", Order{ID: "1002", Amount: 0})
	chargeOnce(ctx, g, "alice", "order-1002", Order{ID: "1002", Amount: 0}) // redelivered
	// Output:
	// order-1001: charged ch_1001 (replayed false)
	// order-1001: charged ch_1001 (replayed true)
	// order-1001: refused: IDEMPOTENCY_KEY_REUSED
	// order-1002: failed: INVALID_ARGUMENT: amount must be > 0 (replayed false)
	// order-1002: failed: INVALID_ARGUMENT: amount must be > 0 (replayed true)
}

// With interceptor.StatusErrors, a gRPC status error is stored with its
// code and details, and every call gets it back as a status error.
func Example_statusErrors() {
	g, err := once.New(memstore.New(), once.Options{Statuses: interceptor.StatusErrors})
	if err != nil {
		log.Fatal(err)
	}
	validate := func(ctx context.Context, amount int64) (string, error) {
		if amount <= 0 {
			st, _ := status.New(codes.InvalidArgument, "amount must be > 0").WithDetails(&errdetails.BadRequest{
				FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be > 0"}}})
			return "", st.Err()
		}
		return "ch_1003", nil
	}
	for range 2 { // the first run, then its replay
		_, answered, err := once.DoValue(context.Background(), g,
			once.Request{Scope: "alice", Key: "order-1003", Operation: "shop.Charge"}, int64(0), validate)
		st, _ := status.FromError(err)
		bad := st.Details()[0].(*errdetails.BadRequest)
		fmt.Println(st.Code(), st.Message(), bad.FieldViolations[0].Field, answered.Replayed)
	}
	// Output:
	// InvalidArgument amount must be > 0 amount false
	// InvalidArgument amount must be > 0 amount true
}
