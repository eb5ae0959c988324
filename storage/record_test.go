package storage_test

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	idempotencyv1 "github.com/paymentsd/paymentsd/gen/idempotency/v1"
	"github.com/paymentsd/paymentsd/storage"
)

func TestRecord_MarshalRoundTrip(t *testing.T) {
	resp, _ := anypb.New(wrapperspb.String("hello"))
	detail, _ := anypb.New(wrapperspb.Int64(7))
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	inFlight := &storage.Record{
		Fingerprint: sha256.Sum256([]byte("req")), Scheme: storage.FingerprintScheme, State: storage.StateInFlight, Attempt: 3,
		Token: storage.ClaimToken{1, 2, 3}, LeaseExpiry: at.Add(time.Second), Expiry: at.Add(time.Hour),
	}
	withResponse := *inFlight
	withResponse.State, withResponse.LeaseExpiry = storage.StateCompleted, time.Time{}
	withResponse.Result = &storage.Result{
		Response: resp,
		Header:   metadata.MD{"b": {"2"}, "a": {"1", "\x00raw"}},
		Trailer:  metadata.MD{"t-bin": {"\xff"}},
	}
	withStatus := withResponse
	withStatus.Result = &storage.Result{Status: &spb.Status{Code: 13, Message: "boom", Details: []*anypb.Any{detail}}}
	transactional := withStatus
	transactional.Durability = storage.Transactional

	for name, r := range map[string]*storage.Record{"in flight": inFlight, "response": &withResponse, "status": &withStatus, "transactional": &transactional} {
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		again, _ := r.MarshalBinary()
		if string(again) != string(b) {
			t.Errorf("%s: two encodings differ", name)
		}
		var got storage.Record
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Fingerprint != r.Fingerprint || got.Scheme != r.Scheme || got.State != r.State || got.Attempt != r.Attempt || got.Token != r.Token ||
			!got.LeaseExpiry.Equal(r.LeaseExpiry) || !got.Expiry.Equal(r.Expiry) || got.Durability != r.Durability {
			t.Errorf("%s: decoded %+v, want %+v", name, got, r)
		}
		if r.Result != nil && (!proto.Equal(got.Result.Response, r.Result.Response) || !proto.Equal(got.Result.Status, r.Result.Status) ||
			fmt.Sprint(got.Result.Header) != fmt.Sprint(r.Result.Header) || fmt.Sprint(got.Result.Trailer) != fmt.Sprint(r.Result.Trailer)) {
			t.Errorf("%s: decoded result %+v, want %+v", name, got.Result, r.Result)
		}
	}
}

func TestRecord_UnmarshalRejectsMalformed(t *testing.T) {
	valid := func() *idempotencyv1.Record {
		fp := sha256.Sum256(nil)
		return &idempotencyv1.Record{
			Fingerprint: fp[:], State: idempotencyv1.State_STATE_IN_FLIGHT, Attempt: 1,
			ClaimToken: make([]byte, 16), ExpireTime: timestamppb.Now(),
		}
	}
	for name, edit := range map[string]func(*idempotencyv1.Record){
		"short fingerprint": func(r *idempotencyv1.Record) { r.Fingerprint = r.Fingerprint[:5] },
		"no claim token":    func(r *idempotencyv1.Record) { r.ClaimToken = nil },
		"no expiry":         func(r *idempotencyv1.Record) { r.ExpireTime = nil },
		"unknown state":     func(r *idempotencyv1.Record) { r.State = 9 },
		"completed, no result": func(r *idempotencyv1.Record) {
			r.State = idempotencyv1.State_STATE_COMPLETED
		},
		"completed, empty result": func(r *idempotencyv1.Record) {
			r.State, r.Result = idempotencyv1.State_STATE_COMPLETED, &idempotencyv1.Result{}
		},
		"in flight with result": func(r *idempotencyv1.Record) { r.Result = &idempotencyv1.Result{} },
	} {
		pb := valid()
		edit(pb)
		b, _ := proto.Marshal(pb)
		var r storage.Record
		if err := r.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
	var r storage.Record
	if err := r.UnmarshalBinary([]byte{0xff, 0xff}); err == nil {
		t.Error("garbage: decoded, want an error")
	}
	b, _ := proto.Marshal(valid())
	if err := r.UnmarshalBinary(b); err != nil {
		t.Errorf("valid record: %v", err)
	}
}
