package storage

import (
	"fmt"
	"sort"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	idempotencyv1 "github.com/paymentsd/paymentsd/gen/idempotency/v1"
)

// MarshalBinary encodes r as an idempotency.v1.Record, deterministically.
// Every store thus keeps records in the same versioned format.
func (r *Record) MarshalBinary() ([]byte, error) {
	pb := &idempotencyv1.Record{
		Fingerprint:       r.Fingerprint[:],
		FingerprintScheme: r.Scheme,
		State:             idempotencyv1.State(r.State),
		Attempt:           r.Attempt,
		ClaimToken:        r.Token[:],
		Owner:             r.Owner,
		ExpireTime:        timestamppb.New(r.Expiry),
		Transactional:     r.Durability == Transactional,
	}
	if !r.LeaseExpiry.IsZero() {
		pb.LeaseExpireTime = timestamppb.New(r.LeaseExpiry)
	}
	if !r.ClaimTime.IsZero() {
		pb.ClaimTime = timestamppb.New(r.ClaimTime)
	}
	if r.Result != nil {
		pb.Result = r.Result.proto()
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pb)
}

// UnmarshalBinary decodes a record written by MarshalBinary. It rejects
// records that could not have been written by it, rather than guess.
func (r *Record) UnmarshalBinary(b []byte) error {
	var pb idempotencyv1.Record
	err := proto.Unmarshal(b, &pb)
	if err != nil {
		return fmt.Errorf("decode idempotency record: %w", err)
	}
	if len(pb.Fingerprint) != len(r.Fingerprint) || len(pb.ClaimToken) != len(r.Token) || pb.ExpireTime == nil {
		return fmt.Errorf("decode idempotency record: missing or malformed fingerprint, claim token or expiry")
	}
	state := State(pb.State)
	if state != StateInFlight && state != StateCompleted {
		return fmt.Errorf("decode idempotency record: unknown state %d", pb.State)
	}
	if (state == StateCompleted) != (pb.Result != nil) {
		return fmt.Errorf("decode idempotency record: state %d with result %t", pb.State, pb.Result != nil)
	}
	*r = Record{
		Scheme: pb.FingerprintScheme, State: state, Attempt: pb.Attempt, Owner: pb.Owner,
		Expiry: pb.ExpireTime.AsTime(),
	}
	if pb.Transactional {
		r.Durability = Transactional
	}
	copy(r.Fingerprint[:], pb.Fingerprint)
	copy(r.Token[:], pb.ClaimToken)
	if pb.LeaseExpireTime != nil {
		r.LeaseExpiry = pb.LeaseExpireTime.AsTime()
	}
	if pb.ClaimTime != nil {
		r.ClaimTime = pb.ClaimTime.AsTime()
	}
	if pb.Result != nil {
		if r.Result, err = resultFromProto(pb.Result); err != nil {
			return fmt.Errorf("decode idempotency record: %w", err)
		}
	}
	return nil
}

// MarshalBinary encodes r as an idempotency.v1.Result, deterministically.
// A store may keep a record's fields apart, in table columns, say. It
// keeps this encoding as the result.
func (r *Result) MarshalBinary() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(r.proto())
}

// UnmarshalBinary decodes a result written by MarshalBinary.
func (r *Result) UnmarshalBinary(b []byte) error {
	var pb idempotencyv1.Result
	if err := proto.Unmarshal(b, &pb); err != nil {
		return fmt.Errorf("decode idempotency result: %w", err)
	}
	res, err := resultFromProto(&pb)
	if err != nil {
		return fmt.Errorf("decode idempotency result: %w", err)
	}
	*r = *res
	return nil
}

func (r *Result) proto() *idempotencyv1.Result {
	pb := &idempotencyv1.Result{
		Header:  encodeMetadata(r.Header),
		Trailer: encodeMetadata(r.Trailer),
	}
	switch {
	case r.Response != nil:
		pb.Outcome = &idempotencyv1.Result_Response{Response: r.Response}
	case r.Status != nil:
		pb.Outcome = &idempotencyv1.Result_Status{Status: &idempotencyv1.Status{
			Code: r.Status.Code, Message: r.Status.Message, Details: r.Status.Details,
		}}
	}
	return pb
}

func resultFromProto(pb *idempotencyv1.Result) (*Result, error) {
	r := &Result{
		Response: pb.GetResponse(),
		Header:   decodeMetadata(pb.Header),
		Trailer:  decodeMetadata(pb.Trailer),
	}
	if st := pb.GetStatus(); st != nil {
		r.Status = &spb.Status{Code: st.Code, Message: st.Message, Details: st.Details}
	}
	if (r.Response == nil) == (r.Status == nil) {
		return nil, fmt.Errorf("result needs exactly one of response and status")
	}
	return r, nil
}

// encodeMetadata lists md sorted by key, so that equal metadata encodes to
// equal bytes.
func encodeMetadata(md map[string][]string) []*idempotencyv1.MetadataEntry {
	if len(md) == 0 {
		return nil
	}
	entries := make([]*idempotencyv1.MetadataEntry, 0, len(md))
	for k, vs := range md {
		e := &idempotencyv1.MetadataEntry{Key: k, Values: make([][]byte, len(vs))}
		for i, v := range vs {
			e.Values[i] = []byte(v)
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	return entries
}

func decodeMetadata(entries []*idempotencyv1.MetadataEntry) map[string][]string {
	if len(entries) == 0 {
		return nil
	}
	md := make(map[string][]string, len(entries))
	for _, e := range entries {
		for _, v := range e.Values {
			md[e.Key] = append(md[e.Key], string(v))
		}
	}
	return md
}
