package server_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/storage"
)

func newServer(t *testing.T) (*server.Server, *testclock.Clock) {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	intents, err := boltintents.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	c := testclock.New()
	return server.New(intents, c.Now), c
}

func as(principal string) context.Context {
	return auth.NewContext(context.Background(), principal)
}

func validRequest() *paymentsv1.CreatePaymentIntentRequest {
	return &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           "100000000",
		ExpiresInSeconds: 900,
	}
}

func create(t *testing.T, s *server.Server, principal string) *paymentsv1.PaymentIntent {
	t.Helper()
	resp, err := s.CreatePaymentIntent(as(principal), validRequest())
	if err != nil {
		t.Fatal(err)
	}
	return resp.PaymentIntent
}

// badFields returns the fields named by err's BadRequest, after checking
// that err is INVALID_ARGUMENT.
func badFields(t *testing.T, err error) []string {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code = %v (%v), want INVALID_ARGUMENT", st.Code(), err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.FieldViolations {
				fields = append(fields, v.Field)
			}
		}
	}
	return fields
}

func TestCreate_ReturnsNewIntent(t *testing.T) {
	s, c := newServer(t)
	pi := create(t, s, "alice")
	if !strings.HasPrefix(pi.Id, "pi_") || len(pi.Id) != 27 || strings.ToLower(pi.Id) != pi.Id {
		t.Errorf("id %q, want pi_ and 24 lowercase hex digits", pi.Id)
	}
	if pi.State != paymentsv1.State_STATE_CREATED || pi.Version != 1 || pi.Amount != "100000000" {
		t.Errorf("intent %v, want created, version 1, the request's amount", pi)
	}
	if got, want := pi.ExpireTime.AsTime(), c.Now().Add(900*time.Second); !got.Equal(want) {
		t.Errorf("expire_time %v, want %v", got, want)
	}
	if other := create(t, s, "alice"); other.Id == pi.Id {
		t.Errorf("two creates gave one id %s", pi.Id)
	}
}

func TestCreate_DefaultExpiry(t *testing.T) {
	s, c := newServer(t)
	req := validRequest()
	req.ExpiresInSeconds = 0
	resp, err := s.CreatePaymentIntent(as("alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.PaymentIntent.ExpireTime.AsTime(), c.Now().Add(900*time.Second); !got.Equal(want) {
		t.Errorf("expire_time %v, want %v", got, want)
	}
}

func TestCreate_InvalidFields(t *testing.T) {
	s, _ := newServer(t)
	max256 := "115792089237316195423570985008687907853269984665640564039457584007913129639935"
	for _, tc := range []struct {
		name   string
		edit   func(*paymentsv1.CreatePaymentIntentRequest)
		fields string
	}{
		{"zero amount", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "0" }, "amount"},
		{"negative amount", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "-1" }, "amount"},
		{"leading zero", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "0100" }, "amount"},
		{"amount 2^256", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = max256[:77] + "6" }, "amount"},
		{"decimal point", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "1.5" }, "amount"},
		{"empty amount", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "" }, "amount"},
		{"chain name", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Chain = "btc:1" }, "chain"},
		{"chain zero", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Chain = "evm:0" }, "chain"},
		{"chain leading zero", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Chain = "evm:01" }, "chain"},
		{"short address", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Payer = "0x1234" }, "payer"},
		{"no 0x", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Token = strings.Repeat("a", 42) }, "token"},
		{"non-hex", func(r *paymentsv1.CreatePaymentIntentRequest) { r.Merchant = "0x" + strings.Repeat("g", 40) }, "merchant"},
		{"expiry too short", func(r *paymentsv1.CreatePaymentIntentRequest) { r.ExpiresInSeconds = 59 }, "expires_in_seconds"},
		{"expiry too long", func(r *paymentsv1.CreatePaymentIntentRequest) { r.ExpiresInSeconds = 86401 }, "expires_in_seconds"},
		{"negative expiry", func(r *paymentsv1.CreatePaymentIntentRequest) { r.ExpiresInSeconds = -1 }, "expires_in_seconds"},
		{"everything", func(r *paymentsv1.CreatePaymentIntentRequest) { *r = paymentsv1.CreatePaymentIntentRequest{} },
			"chain,token,payer,merchant,amount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest()
			tc.edit(req)
			_, err := s.CreatePaymentIntent(as("alice"), req)
			if got := strings.Join(badFields(t, err), ","); got != tc.fields {
				t.Errorf("bad fields %q, want %q", got, tc.fields)
			}
		})
	}
	for _, amount := range []string{"1", max256} {
		req := validRequest()
		req.Amount = amount
		if _, err := s.CreatePaymentIntent(as("alice"), req); err != nil {
			t.Errorf("amount %s: %v", amount, err)
		}
	}
	for _, secs := range []int32{60, 86400} {
		req := validRequest()
		req.ExpiresInSeconds = secs
		if _, err := s.CreatePaymentIntent(as("alice"), req); err != nil {
			t.Errorf("expires_in_seconds %d: %v", secs, err)
		}
	}
}

func TestIntents_OwnedByTheirPrincipal(t *testing.T) {
	s, _ := newServer(t)
	pi := create(t, s, "alice")
	if _, err := s.GetPaymentIntent(as("bob"), &paymentsv1.GetPaymentIntentRequest{Id: pi.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("bob's Get of alice's intent: %v, want NOT_FOUND", err)
	}
	if _, err := s.CancelPaymentIntent(as("bob"), &paymentsv1.CancelPaymentIntentRequest{Id: pi.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("bob's Cancel of alice's intent: %v, want NOT_FOUND", err)
	}
	list, err := s.ListPaymentIntents(as("bob"), &paymentsv1.ListPaymentIntentsRequest{})
	if err != nil || len(list.PaymentIntents) != 0 {
		t.Errorf("bob's list = %v, %v; want empty", list, err)
	}
	got, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: pi.Id})
	if err != nil || !proto.Equal(got.PaymentIntent, pi) {
		t.Errorf("alice's Get = %v, %v; want %v", got, err, pi)
	}
	if _, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: "pi_000000000000000000000000"}); status.Code(err) != codes.NotFound {
		t.Errorf("Get of a missing id: %v, want NOT_FOUND", err)
	}
	if _, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: "../x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Get of a malformed id: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := s.GetPaymentIntent(context.Background(), &paymentsv1.GetPaymentIntentRequest{Id: pi.Id}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Get without a principal: %v, want UNAUTHENTICATED", err)
	}
}

// A store's error that wraps ErrDamaged is answered DATA_LOSS, any other
// UNAVAILABLE; the store's own text stays out of the answer.
func TestStorageErrors_DamageIsDataLoss(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("intent secret: checksum mismatch: %w", server.ErrDamaged), codes.DataLoss},
		{errors.New("secret: no space left on device"), codes.Unavailable},
	} {
		s := server.New(failingStore{err: tc.err}, nil)
		_, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: "pi_000000000000000000000000"})
		if st := status.Convert(err); st.Code() != tc.want || strings.Contains(st.Message(), "secret") {
			t.Errorf("Get over a store failing with %q: %v, want %v without the store's text", tc.err, err, tc.want)
		}
	}
}

// A principal whose intents are away for now (its pod down, or moving) is
// answered UNAVAILABLE with the store's retry delay.
func TestStorageErrors_ScopeUnavailableHasRetryDelay(t *testing.T) {
	away := &storage.ScopeUnavailableError{Scope: "alice", Why: "moving", RetryAfter: 2 * time.Second, Err: errors.New("secret")}
	s := server.New(failingStore{err: fmt.Errorf("pod a: %w", away)}, nil)
	_, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: "pi_000000000000000000000000"})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "moving") || strings.Contains(st.Message(), "secret") {
		t.Fatalf("Get of a principal away: %v, want UNAVAILABLE saying why, without the cause", err)
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.RetryDelay.AsDuration()
		}
	}
	if delay != 2*time.Second {
		t.Errorf("RetryInfo %v, want the store's 2s", delay)
	}
}

// failingStore fails every read with err.
type failingStore struct {
	server.IntentStore
	err error
}

func (f failingStore) GetIntent(context.Context, string, string) (*paymentsv1.PaymentIntent, error) {
	return nil, f.err
}

func TestCancel_IsIdempotent(t *testing.T) {
	s, c := newServer(t)
	pi := create(t, s, "alice")
	c.Advance(time.Minute)
	first, err := s.CancelPaymentIntent(as("alice"), &paymentsv1.CancelPaymentIntentRequest{Id: pi.Id})
	if err != nil {
		t.Fatal(err)
	}
	got := first.PaymentIntent
	if got.State != paymentsv1.State_STATE_CANCELED || got.Version != 2 ||
		got.CancellationReason != paymentsv1.CancellationReason_CANCELLATION_REASON_REQUESTED || !got.CancelTime.AsTime().Equal(c.Now()) {
		t.Errorf("canceled intent %v, want canceled as requested, version 2, at %v", got, c.Now())
	}
	c.Advance(time.Minute)
	again, err := s.CancelPaymentIntent(as("alice"), &paymentsv1.CancelPaymentIntentRequest{Id: pi.Id})
	if err != nil || !proto.Equal(again.PaymentIntent, got) {
		t.Errorf("second cancel = %v, %v; want the intent unchanged", again, err)
	}
}

func TestExpiredIntent_CanceledBySystem(t *testing.T) {
	s, c := newServer(t)
	pi := create(t, s, "alice")
	c.Advance(900 * time.Second)
	want := func(got *paymentsv1.PaymentIntent, how string) {
		t.Helper()
		if got.State != paymentsv1.State_STATE_CANCELED || got.Version != 2 ||
			got.CancellationReason != paymentsv1.CancellationReason_CANCELLATION_REASON_EXPIRED ||
			!got.CancelTime.AsTime().Equal(pi.ExpireTime.AsTime()) {
			t.Errorf("%s: %v, want canceled by expiry at %v, version 2", how, got, pi.ExpireTime.AsTime())
		}
	}
	got, err := s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: pi.Id})
	if err != nil {
		t.Fatal(err)
	}
	want(got.PaymentIntent, "Get")
	list, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{})
	if err != nil || len(list.PaymentIntents) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}
	want(list.PaymentIntents[0], "List")
	canceled, err := s.CancelPaymentIntent(as("alice"), &paymentsv1.CancelPaymentIntentRequest{Id: pi.Id})
	if err != nil {
		t.Fatal(err)
	}
	want(canceled.PaymentIntent, "Cancel")
	c.Advance(time.Hour)
	got, _ = s.GetPaymentIntent(as("alice"), &paymentsv1.GetPaymentIntentRequest{Id: pi.Id})
	want(got.PaymentIntent, "Get after Cancel")
}

func TestList_PagesInCreationOrder(t *testing.T) {
	s, c := newServer(t)
	var want []string
	for range 7 {
		want = append(want, create(t, s, "alice").Id)
		c.Advance(time.Millisecond)
	}
	create(t, s, "bob")
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatal("paging does not end")
		}
		resp, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, pi := range resp.PaymentIntents {
			got = append(got, pi.Id)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("listed %v, want %v", got, want)
	}

	first, _ := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if _, err := s.ListPaymentIntents(as("bob"), &paymentsv1.ListPaymentIntentsRequest{PageToken: first.NextPageToken}); len(badFields(t, err)) != 1 {
		t.Errorf("bob using alice's page token: %v, want INVALID_ARGUMENT on page_token", err)
	}
	// Any change to a real token is refused, never read as a position.
	tok := first.NextPageToken
	last := "B"
	if strings.HasSuffix(tok, last) {
		last = "C"
	}
	for _, token := range []string{"garbage!", "AAAA", tok[:len(tok)-20], tok + "A", tok + "_", tok[:len(tok)-1] + last, tok[1:], tok + "=="} {
		_, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageToken: token})
		if got := badFields(t, err); len(got) != 1 || got[0] != "page_token" {
			t.Errorf("page token %q: fields %v, want INVALID_ARGUMENT on page_token", token, got)
		}
	}
	if _, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageSize: -1}); len(badFields(t, err)) != 1 {
		t.Errorf("negative page_size: %v", err)
	}
	all, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1 << 30})
	if err != nil || len(all.PaymentIntents) != 7 || all.NextPageToken != "" {
		t.Errorf("huge page_size: %d intents, token %q, %v; want all 7 and no token", len(all.GetPaymentIntents()), all.GetNextPageToken(), err)
	}
}

func TestUnknownFields_Rejected(t *testing.T) {
	s, _ := newServer(t)
	// Field 99, a varint, unknown to every request message.
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	withUnknown := func(m proto.Message) proto.Message {
		b, _ := proto.Marshal(m)
		if err := proto.Unmarshal(append(b, unknown...), m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	pi := create(t, s, "alice")
	for name, call := range map[string]func() error{
		"Create": func() error {
			_, err := s.CreatePaymentIntent(as("alice"), withUnknown(validRequest()).(*paymentsv1.CreatePaymentIntentRequest))
			return err
		},
		"Get": func() error {
			_, err := s.GetPaymentIntent(as("alice"), withUnknown(&paymentsv1.GetPaymentIntentRequest{Id: pi.Id}).(*paymentsv1.GetPaymentIntentRequest))
			return err
		},
		"Cancel": func() error {
			_, err := s.CancelPaymentIntent(as("alice"), withUnknown(&paymentsv1.CancelPaymentIntentRequest{Id: pi.Id}).(*paymentsv1.CancelPaymentIntentRequest))
			return err
		},
		"List": func() error {
			_, err := s.ListPaymentIntents(as("alice"), withUnknown(&paymentsv1.ListPaymentIntentsRequest{}).(*paymentsv1.ListPaymentIntentsRequest))
			return err
		},
	} {
		if got := badFields(t, call()); len(got) != 1 || got[0] != "#99" {
			t.Errorf("%s with unknown field 99: bad fields %v, want [#99]", name, got)
		}
	}
	// Nothing changed: the intent is still created, and the only one.
	list, _ := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{})
	if len(list.PaymentIntents) != 1 || list.PaymentIntents[0].State != paymentsv1.State_STATE_CREATED {
		t.Errorf("after rejected requests: %v, want the one created intent", list.PaymentIntents)
	}
}

// Lists read at most ListBudget intents at once: one more is refused at
// once, UNAVAILABLE, rather than wait holding a call slot; once a List
// ends, its room is free again.
func TestList_Budget_RefusesAtOnceThenFrees(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	s := server.New(blockingLists{held: held, release: release}, nil)
	lists := server.ListBudget / server.MaxPageSize
	errs := make(chan error, lists)
	for range lists {
		go func() {
			_, err := s.ListPaymentIntents(as("alice"), &paymentsv1.ListPaymentIntentsRequest{PageSize: server.MaxPageSize})
			errs <- err
		}()
		<-held
	}
	_, err := s.ListPaymentIntents(as("bob"), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a List past the budget: %v, want UNAVAILABLE", err)
	}
	close(release)
	for range lists {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	go func() { <-held }()
	if _, err := s.ListPaymentIntents(as("bob"), &paymentsv1.ListPaymentIntentsRequest{PageSize: server.MaxPageSize}); err != nil {
		t.Fatalf("a List once the others ended: %v", err)
	}
}

// blockingLists holds each List until release is closed, telling held
// when one is held.
type blockingLists struct {
	server.IntentStore
	held, release chan struct{}
}

func (b blockingLists) ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error) {
	b.held <- struct{}{}
	<-b.release
	return nil, nil, nil
}
