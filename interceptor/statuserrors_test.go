package interceptor_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// With StatusErrors, a function's gRPC status error keeps its code and
// details through once.DoValue, on the first run and on the replay; a
// refusal stays a *once.Refusal.
func TestStatusErrors_DoValueKeepsCodeAndDetails(t *testing.T) {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	invalid, err := status.New(codes.InvalidArgument, "amount must be > 0").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be > 0"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]storage.Store{"memstore": memstore.New(), "boltstore": db} {
		t.Run(name, func(t *testing.T) {
			g, err := once.New(store, once.Options{Statuses: interceptor.StatusErrors})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			charge := func(context.Context, int) (string, error) {
				runs++
				return "", invalid.Err()
			}
			req := once.Request{Scope: "alice", Key: "k", Operation: "charge"}
			for i := range 2 {
				_, answered, err := once.DoValue(context.Background(), g, req, 0, charge)
				got, ok := status.FromError(err)
				if !ok || !proto.Equal(got.Proto(), invalid.Proto()) || answered.Replayed != (i > 0) || runs != 1 {
					t.Fatalf("DoValue #%d: %v, %+v after %d runs; want %v with its details, replayed %t, 1 run", i+1, err, answered, runs, invalid.Proto(), i > 0)
				}
			}
			_, _, err = once.DoValue(context.Background(), g, req, 1, charge)
			var refused *once.Refusal
			if !errors.As(err, &refused) || !errors.Is(err, once.ErrKeyReused) || status.Code(status.ErrorProto(refused.Status)) != codes.FailedPrecondition {
				t.Fatalf("DoValue of another amount: %v, want a refusal ErrKeyReused, FAILED_PRECONDITION", err)
			}
		})
	}
}
