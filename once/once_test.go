package once_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
)

func guard(t *testing.T) *once.Guard {
	t.Helper()
	g, err := once.New(memstore.New(), once.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func request(key string) once.Request {
	return once.Request{Scope: "alice", Key: key, Operation: "/test/Op", Message: wrapperspb.String("body")}
}

// A typed nil response is stored as an empty message, and the first call
// gets what every retry gets.
func TestDo_TypedNilResponse_AnsweredAsStored(t *testing.T) {
	g := guard(t)
	for i := range 2 {
		got, _, err := once.Do(context.Background(), g, request("k"), func(context.Context) (*wrapperspb.StringValue, error) { return nil, nil })
		if err != nil || got == nil || got.GetValue() != "" {
			t.Fatalf("Do #%d = %v, %v; want an empty message", i+1, got, err)
		}
	}
}

// A typed nil *StoredError is an error like any other: stored as UNKNOWN, never
// a panic after the function ran.
func TestDo_TypedNilError_StoredAsUnknown(t *testing.T) {
	g := guard(t)
	runs := 0
	for i := range 2 {
		_, _, err := once.Do(context.Background(), g, request("k"), func(context.Context) (*wrapperspb.StringValue, error) {
			runs++
			var e *once.StoredError
			return wrapperspb.String("x"), e
		})
		var e *once.StoredError
		if !errors.As(err, &e) || e.Code() != code.Code_UNKNOWN || runs != 1 {
			t.Fatalf("Do #%d: %v after %d runs, want the stored UNKNOWN after 1", i+1, err, runs)
		}
	}
}

// A caller that changes the stored error it was given changes no replay.
func TestDo_StoredError_CallersOwnCopy(t *testing.T) {
	g := guard(t)
	fn := func(context.Context) (*wrapperspb.StringValue, error) {
		return nil, once.Errorf(code.Code_INVALID_ARGUMENT, "bad")
	}
	_, _, err := once.Do(context.Background(), g, request("k"), fn)
	var e *once.StoredError
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
	e.Status.Message = "changed"
	_, _, err = once.Do(context.Background(), g, request("k"), fn)
	if !errors.As(err, &e) || e.Status.Message != "bad" {
		t.Fatalf("replay after a change: %v, want the stored bad", err)
	}
}

func TestNew_NegativeResultSize_Refused(t *testing.T) {
	if _, err := once.New(memstore.New(), once.Options{MaxResultSize: -1}); err == nil {
		t.Fatal("New with a negative result size: nil error")
	}
}
