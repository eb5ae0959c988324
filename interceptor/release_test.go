package interceptor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/storage"
)

// stored returns the record the harness's store holds for token's key.
func (h *harness) stored(t *testing.T, token, key string) *storage.Record {
	t.Helper()
	sum := sha256.Sum256([]byte(token))
	rec, err := h.db.Get(context.Background(), storage.RecordKey{Scope: "sha256:" + hex.EncodeToString(sum[:]), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestRecord_SaysWhetherATransactionalMethodStoredIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []interceptor.Option
		want bool
	}{
		{"transactional", []interceptor.Option{interceptor.WithTransactional(unaryCall)}, true},
		{"durable claim", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.opts...)
			h.writeOrder(t, status.Error(codes.InvalidArgument, "bad amount"))
			if err := h.send("tok", "k", payload("x")).err; status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want INVALID_ARGUMENT", err)
			}
			rec := h.stored(t, "tok", "k")
			if rec == nil || rec.State != storage.StateCompleted || (rec.Durability == storage.Transactional) != tc.want {
				t.Fatalf("stored %+v, want completed with Durability Transactional %t", rec, tc.want)
			}
		})
	}
}

func TestWithoutStoring_TransactionalMethod_KeyStaysFreeAndWritesRollBack(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall), interceptor.WithoutStoring(codes.Unavailable))
	h.writeOrder(t, status.Error(codes.Unavailable, "downstream is down"))
	if err := h.send("tok", "k", payload("x")).err; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "downstream is down") {
		t.Fatalf("got %v, want the handler's UNAVAILABLE", err)
	}
	if rec := h.stored(t, "tok", "k"); rec != nil {
		t.Fatalf("stored %+v, want no record", rec)
	}
	if h.hasOrder("x") {
		t.Error("the failed run's write was kept")
	}
	h.writeOrder(t, nil) // the downstream is back
	if a := h.send("tok", "k", payload("x")); a.err != nil || a.replayed() {
		t.Fatalf("retry: replayed %t, %v; want a fresh run", a.replayed(), a.err)
	}
	h.wantCalls(t, 2)
	if !h.hasOrder("x") {
		t.Error("the fresh run's write was not kept")
	}
}

func TestWithoutStoring_OtherCodesAndNonTransactionalMethods_AreStored(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []interceptor.Option
		err  error
	}{
		{"default stores every result", []interceptor.Option{interceptor.WithTransactional(unaryCall)}, status.Error(codes.Unavailable, "down")},
		{"a code not named", []interceptor.Option{interceptor.WithTransactional(unaryCall), interceptor.WithoutStoring(codes.Unavailable)}, status.Error(codes.InvalidArgument, "bad")},
		{"a method not transactional", []interceptor.Option{interceptor.WithoutStoring(codes.Unavailable)}, status.Error(codes.Unavailable, "down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.opts...)
			h.writeOrder(t, tc.err)
			h.send("tok", "k", payload("x"))
			if a := h.send("tok", "k", payload("x")); status.Code(a.err) != status.Code(tc.err) || !a.replayed() {
				t.Fatalf("retry: replayed %t, %v; want the stored %v", a.replayed(), a.err, tc.err)
			}
			h.wantCalls(t, 1)
		})
	}
}

func TestWithoutStoring_OK_IsRefused(t *testing.T) {
	db, err := boltstore.Open(t.TempDir()+"/db", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := interceptor.UnaryServerInterceptor(db, interceptor.WithoutStoring(codes.OK)); err == nil {
		t.Fatal("WithoutStoring(OK) was accepted")
	}
}
