// Package recordview is what an operator sees of an idempotency record.
// View holds its data, to print as text (WriteText) or JSON. The lookups
// find the record in a bbolt file or a PostgreSQL database. The package is
// what paymentsd record shows.
package recordview

import (
	"encoding/hex"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/types/known/anypb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/storage"
)

// View is a record as an operator sees it. The JSON names are stable, for
// scripts. A field that does not apply is null.
type View struct {
	Principal         string     `json:"principal"`
	Key               string     `json:"key"`
	State             string     `json:"state"` // in_flight, completed or expired
	Attempt           uint64     `json:"attempt"`
	Fingerprint       string     `json:"fingerprint"` // hex
	FingerprintScheme string     `json:"fingerprint_scheme"`
	Owner             string     `json:"owner"`        // the process that claimed it
	LeaseExpiry       *time.Time `json:"lease_expiry"` // of a claim in flight
	// ClaimTime is when the attempt that stored the record began. It is
	// null for records stored before it was kept.
	ClaimTime *time.Time `json:"claim_time"`
	Expiry    time.Time  `json:"expiry"`
	Completed bool       `json:"completed"`
	// Transactional says a transactional method stored the record. So a
	// stored error of it may be released (paymentsd release).
	Transactional bool     `json:"transactional"`
	Code          *string  `json:"code"` // OK, INVALID_ARGUMENT, ...
	Message       *string  `json:"message"`
	Details       []string `json:"details"`       // the error's detail types
	ResponseType  *string  `json:"response_type"` // of a stored response
	IntentID      *string  `json:"intent_id"`     // of a stored create or cancel

	// decoded are the error's details with their fields, for the text.
	decoded []Detail
}

// The states of a View.
const (
	StateInFlight  = "in_flight"
	StateCompleted = "completed"
	StateExpired   = "expired"
)

// New returns the view of rec, stored for k, as of now.
func New(k storage.RecordKey, rec *storage.Record, now time.Time) *View {
	v := &View{
		Principal:         k.Scope,
		Key:               k.Key,
		Attempt:           rec.Attempt,
		Fingerprint:       hex.EncodeToString(rec.Fingerprint[:]),
		FingerprintScheme: rec.Scheme,
		Owner:             rec.Owner,
		Expiry:            rec.Expiry.UTC(),
		Completed:         rec.State == storage.StateCompleted,
		Transactional:     rec.Durability == storage.Transactional,
		Details:           []string{},
	}
	switch {
	case !rec.Expiry.After(now):
		v.State = StateExpired
	case v.Completed:
		v.State = StateCompleted
	default:
		v.State = StateInFlight
	}
	if !v.Completed && !rec.LeaseExpiry.IsZero() {
		t := rec.LeaseExpiry.UTC()
		v.LeaseExpiry = &t
	}
	if !rec.ClaimTime.IsZero() {
		t := rec.ClaimTime.UTC()
		v.ClaimTime = &t
	}
	if rec.Result != nil {
		v.setResult(rec.Result)
	}
	return v
}

// setResult fills in what res, a stored result, says.
func (v *View) setResult(res *storage.Result) {
	c, msg := code.Code_OK.String(), ""
	if res.Status != nil {
		c, msg = code.Code(res.Status.Code).String(), res.Status.Message
		for _, d := range res.Status.Details {
			v.Details = append(v.Details, string(d.MessageName()))
		}
		v.decoded = DecodeDetails(res.Status.Details)
	}
	v.Code, v.Message = &c, &msg
	if res.Response != nil {
		typ := string(res.Response.MessageName())
		v.ResponseType = &typ
		v.IntentID = storedIntentID(res.Response)
	}
}

// storedIntentID returns the id of the payment intent a stored payments.v1
// response carries, if it carries one.
func storedIntentID(resp *anypb.Any) *string {
	if resp.MessageName().Parent() != "payments.v1" {
		return nil
	}
	m, err := resp.UnmarshalNew()
	if err != nil {
		return nil
	}
	withIntent, ok := m.(interface {
		GetPaymentIntent() *paymentsv1.PaymentIntent
	})
	if !ok || withIntent.GetPaymentIntent() == nil {
		return nil
	}
	id := withIntent.GetPaymentIntent().GetId()
	return &id
}
