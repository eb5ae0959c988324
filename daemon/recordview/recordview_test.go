package recordview_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

var (
	now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	key = storage.RecordKey{Scope: "alice", Key: "order-1"}
)

// inFlight is a claim made at now, its lease a minute, its record an hour.
func inFlight() *storage.Record {
	return &storage.Record{
		Fingerprint: storage.Fingerprint{0xab, 0xcd},
		Scheme:      storage.FingerprintScheme,
		State:       storage.StateInFlight,
		Attempt:     2,
		Owner:       "host-1",
		LeaseExpiry: now.Add(time.Minute),
		ClaimTime:   now.Add(-5 * time.Second),
		Expiry:      now.Add(time.Hour),
	}
}

func created(t *testing.T, id string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(&paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: id}})
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}

func text(v *recordview.View, now time.Time) string {
	var b strings.Builder
	v.WriteText(&b, now)
	return b.String()
}

func TestNew_InFlight(t *testing.T) {
	v := recordview.New(key, inFlight(), now)
	if v.State != recordview.StateInFlight || v.Completed || v.Attempt != 2 || v.Owner != "host-1" ||
		v.Fingerprint[:4] != "abcd" || v.LeaseExpiry == nil || !v.LeaseExpiry.Equal(now.Add(time.Minute)) || v.Code != nil {
		t.Errorf("view of a claim in flight: %+v", v)
	}
	got := text(v, now)
	for _, want := range []string{
		"principal:          alice\n",
		"key:                \"order-1\"\n",
		"state:              in flight\n",
		"attempt:            2\n",
		"attempt began:      2030-01-02T03:04:00Z (5s ago)\n",
		"lease expires:      2030-01-02T03:05:05Z (in 1m0s)\n",
		"record expires:     2030-01-02T04:04:05Z (in 1h0m0s)\n",
		"claimed by:         host-1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
	if got := text(v, now.Add(2*time.Minute)); !strings.Contains(got, "its lease ran out") || !strings.Contains(got, "(1m0s ago)") {
		t.Errorf("text once the lease ran out:\n%s", got)
	}
}

func TestNew_CompletedCreate_NamesTheIntent(t *testing.T) {
	rec := inFlight().Completed(created(t, "pi_123"))
	v := recordview.New(key, rec, now)
	if v.State != recordview.StateCompleted || !v.Completed || v.LeaseExpiry != nil ||
		*v.Code != "OK" || *v.Message != "" || *v.ResponseType != "payments.v1.CreatePaymentIntentResponse" || *v.IntentID != "pi_123" {
		t.Errorf("view of a completed create: %+v", v)
	}
	got := text(v, now)
	for _, want := range []string{"state:              completed\n", "code:               OK\n", "intent:             pi_123\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "message:") || strings.Contains(got, "lease expires:") {
		t.Errorf("text shows what does not apply:\n%s", got)
	}
}

func TestNew_CompletedFailure_NamesItsDetails(t *testing.T) {
	detail, err := anypb.New(&errdetails.ErrorInfo{Reason: "DECLINED"})
	if err != nil {
		t.Fatal(err)
	}
	st := &spb.Status{Code: int32(codes.FailedPrecondition), Message: "card declined", Details: []*anypb.Any{detail}}
	v := recordview.New(key, inFlight().Completed(&storage.Result{Status: st}), now)
	if *v.Code != "FAILED_PRECONDITION" || *v.Message != "card declined" || !slices.Equal(v.Details, []string{"google.rpc.ErrorInfo"}) ||
		v.ResponseType != nil || v.IntentID != nil {
		t.Errorf("view of a failure: %+v", v)
	}
	got := text(v, now)
	for _, want := range []string{"message:            card declined\n", "details:            google.rpc.ErrorInfo\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
}

func TestNew_Expired(t *testing.T) {
	later := now.Add(2 * time.Hour)
	if got := text(recordview.New(key, inFlight(), later), later); !strings.Contains(got, "expired (never completed; the key now runs fresh)") {
		t.Errorf("an expired claim:\n%s", got)
	}
	done := inFlight().Completed(created(t, "pi_1"))
	if got := text(recordview.New(key, done, later), later); !strings.Contains(got, "expired (completed; the key now runs fresh)") {
		t.Errorf("an expired completion:\n%s", got)
	}
}

// The JSON names are for scripts: they do not change, and a field that does
// not apply is null, never left out.
func TestView_JSONNames(t *testing.T) {
	b, err := json.Marshal(recordview.New(key, inFlight(), now))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"attempt", "claim_time", "code", "completed", "details", "expiry", "fingerprint", "fingerprint_scheme", "intent_id",
		"key", "lease_expiry", "message", "owner", "principal", "response_type", "state", "transactional"}
	got := make([]string, 0, len(fields))
	for name := range fields {
		got = append(got, name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("JSON fields %v, want %v", got, want)
	}
	if fields["code"] != nil || fields["details"] == nil {
		t.Errorf("code %v, details %v: want null and []", fields["code"], fields["details"])
	}
}

// claim claims key in s, now, and completes it as a create of intent id.
func claim(t *testing.T, s storage.Store, id string) {
	t.Helper()
	ctx := context.Background()
	_, rec, err := s.Claim(ctx, storage.ClaimRequest{Key: key, Scheme: storage.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, key, rec.Completed(created(t, id))); err != nil {
		t.Fatal(err)
	}
}

func TestLookupBolt_HeldOrNot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	claim(t, db, "pi_bolt")
	admin, err := boltadmin.Serve(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	wantLookup(t, recordview.LookupBolt, path, "pi_bolt") // through the server

	admin.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantLookup(t, recordview.LookupBolt, path, "pi_bolt") // the file itself
}

func TestLookupPostgres(t *testing.T) {
	url := pgtest.Require(t, cluster).NewDatabase(t, "recordview_lookup")
	ctx := context.Background()
	if _, err := recordview.LookupPostgres(ctx, url, key); err == nil {
		t.Error("a lookup in a database without the schema succeeded, want it refused")
	}
	pg, err := pgstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	claim(t, pg, "pi_pg")
	wantLookup(t, recordview.LookupPostgres, url, "pi_pg")
}

type lookupFunc func(context.Context, string, storage.RecordKey) (*storage.Record, error)

// wantLookup looks key and another key up in db and checks that key's
// record is a create of intent id, and the other has none.
func wantLookup(t *testing.T, lookup lookupFunc, db, id string) {
	t.Helper()
	ctx := context.Background()
	rec, err := lookup(ctx, db, key)
	if err != nil || rec == nil {
		t.Fatalf("lookup = %v, %v", rec, err)
	}
	if v := recordview.New(key, rec, time.Now()); v.IntentID == nil || *v.IntentID != id {
		t.Errorf("view of the record found: %+v, want intent %s", v, id)
	}
	other := storage.RecordKey{Scope: key.Scope, Key: "order-2"}
	if rec, err := lookup(ctx, db, other); rec != nil || err != nil {
		t.Errorf("lookup of a key never used = %v, %v; want nil, nil", rec, err)
	}
}

func TestView_Transactional_InTextAndJSON(t *testing.T) {
	done := inFlight().Completed(created(t, "pi_1"))
	done.Durability = storage.Transactional
	v := recordview.New(key, done, now)
	if !v.Transactional || !strings.Contains(text(v, now), "transactional:      yes") {
		t.Errorf("a transactional method's record: %+v\n%s", v, text(v, now))
	}
	b, _ := json.Marshal(v)
	if !strings.Contains(string(b), `"transactional":true`) {
		t.Errorf("JSON %s lacks transactional true", b)
	}
	done.Durability = storage.Durable
	if got := text(recordview.New(key, done, now), now); !strings.Contains(got, "transactional:      no\n") {
		t.Errorf("another method's record:\n%s", got)
	}
}

// lookUpStored claims key in a new bbolt file at claimed, lets store
// complete it or not, closes the file, and returns the view of the record
// read back from the file, as paymentsd record reads it.
func lookUpStored(t *testing.T, claimed time.Time, lease time.Duration, store func(storage.Store, *storage.Record)) *recordview.View {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, rec, err := db.Claim(context.Background(), storage.ClaimRequest{Key: key, Scheme: storage.FingerprintScheme, Now: claimed, Lease: lease, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if store != nil {
		store(db, rec)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	found, err := recordview.LookupBolt(context.Background(), path, key)
	if err != nil || found == nil {
		t.Fatalf("lookup = %v, %v", found, err)
	}
	return recordview.New(key, found, claimed)
}

// A just-begun attempt, and a lease a fraction of a second from its end
// on either side, read as under a second, never as "in 0s".
func TestWriteText_UnderASecond_SaysSoBothWays(t *testing.T) {
	claimed := time.Now()
	v := lookUpStored(t, claimed, 400*time.Millisecond, nil)
	got := text(v, claimed)
	for _, want := range []string{
		"attempt began:      " + v.ClaimTime.Format(time.RFC3339) + " (under a second ago)\n",
		"lease expires:      " + v.LeaseExpiry.Format(time.RFC3339) + " (in under a second)\n",
		"record expires:     " + v.Expiry.Format(time.RFC3339) + " (in 1h0m0s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("just claimed: text lacks %q:\n%s", want, got)
		}
	}
	got = text(v, claimed.Add(600*time.Millisecond))
	for _, want := range []string{"its lease ran out", " (under a second ago)\nlease expires:", " (under a second ago)\nrecord expires:"} {
		if !strings.Contains(got, want) {
			t.Errorf("200ms past the lease: text lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, " 0s") {
		t.Errorf("text says 0s:\n%s", got)
	}
}

// The text of a stored error shows each detail's fields under its type,
// as the console's tables do, read back from a real file. Text that could
// break the line or drive the terminal is quoted.
func TestWriteText_StoredError_ShowsEachDetailsFields(t *testing.T) {
	details := []proto.Message{
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "amount", Description: "must be a whole number of minor units"},
			{Field: "currency", Description: "must be an ISO 4217 code\n\x1b[2J"},
		}},
		&errdetails.ErrorInfo{Reason: "AMOUNT_NOT_WHOLE", Domain: "payments.example", Metadata: map[string]string{"zeta": "last", "alpha": "first"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: "TOS", Subject: "acme.example", Description: "terms not accepted"}}},
		&errdetails.ResourceInfo{ResourceType: "payment_intent", ResourceName: "pi_1", Owner: "alice", Description: "already captured"},
		&errdetails.Help{Links: []*errdetails.Help_Link{{Description: "Amounts", Url: "https://docs.example/amounts"}}},
		&errdetails.LocalizedMessage{Locale: "fr-FR", Message: "montant invalide"},
		&errdetails.DebugInfo{Detail: "stack elided"},
	}
	st := &spb.Status{Code: int32(codes.InvalidArgument), Message: "invalid amount"}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			t.Fatal(err)
		}
		st.Details = append(st.Details, a)
	}
	st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/acme.v1.Unheard", Value: []byte{1, 2, 3}})
	v := lookUpStored(t, now, time.Minute, func(s storage.Store, rec *storage.Record) {
		if err := s.Complete(context.Background(), key, rec.Completed(&storage.Result{Status: st})); err != nil {
			t.Fatal(err)
		}
	})
	want := "details:            google.rpc.BadRequest, google.rpc.ErrorInfo, google.rpc.RetryInfo, google.rpc.PreconditionFailure, " +
		"google.rpc.ResourceInfo, google.rpc.Help, google.rpc.LocalizedMessage, google.rpc.DebugInfo, acme.v1.Unheard\n" +
		"  google.rpc.BadRequest\n" +
		"    violation:      amount: must be a whole number of minor units\n" +
		`    violation:      "currency: must be an ISO 4217 code\n\x1b[2J"` + "\n" +
		"  google.rpc.ErrorInfo\n" +
		"    reason:         AMOUNT_NOT_WHOLE\n" +
		"    domain:         payments.example\n" +
		"    metadata:       alpha: first\n" +
		"    metadata:       zeta: last\n" +
		"  google.rpc.RetryInfo\n" +
		"    retry after:    1.5s (a hint, not a rule)\n" +
		"  google.rpc.PreconditionFailure\n" +
		"    violation:      TOS acme.example: terms not accepted\n" +
		"  google.rpc.ResourceInfo\n" +
		"    type:           payment_intent\n" +
		"    name:           pi_1\n" +
		"    owner:          alice\n" +
		"    description:    already captured\n" +
		"  google.rpc.Help\n" +
		"    link:           Amounts https://docs.example/amounts\n" +
		"  google.rpc.LocalizedMessage\n" +
		"    localized:      fr-FR: montant invalide\n" +
		"  google.rpc.DebugInfo\n" +
		`    value:          {"detail":"stack elided"}` + "\n" +
		"  acme.v1.Unheard\n" +
		"    value:          not shown: a type this build does not know\n"
	if got := text(v, now); !strings.Contains(got, want) {
		t.Errorf("text of a stored error's details:\n%s\nwant it to hold:\n%s", got, want)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"details":["google.rpc.BadRequest","google.rpc.ErrorInfo",`) {
		t.Errorf("JSON %s: want details named by type, as before", b)
	}
}
