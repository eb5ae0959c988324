package interceptor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplay_IdenticalResponseAndMetadata_HandlerRunsOnce(t *testing.T) {
	h := start(t)
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		grpc.SetHeader(ctx, metadata.Pairs("x-header", "h1", "x-data-bin", "\x00\x01"))
		grpc.SendHeader(ctx, metadata.Pairs("x-sent", "early"))
		grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t1", "x-trailer", "t2"))
		return &testgrpc.SimpleResponse{Payload: req.Payload, Username: fmt.Sprint(time.Now().UnixNano())}, nil
	}
	first := h.send("tok", "k1", payload("pay 100"))
	if first.err != nil {
		t.Fatal(first.err)
	}
	if got := first.header.Get(wire.ReplayedHeader); len(got) != 0 {
		t.Errorf("first answer has %s: %v", wire.ReplayedHeader, got)
	}
	for i := range 3 {
		again := h.send("tok", "k1", payload("pay 100"))
		if again.err != nil {
			t.Fatalf("replay %d: %v", i, again.err)
		}
		if got, want := marshal(t, again.resp), marshal(t, first.resp); string(got) != string(want) {
			t.Errorf("replay %d body = %x, want %x", i, got, want)
		}
		if got := again.header.Get(wire.ReplayedHeader); len(got) != 1 || got[0] != "true" {
			t.Errorf("replay %d: %s = %v, want [true]", i, wire.ReplayedHeader, got)
		}
		for _, k := range []string{"x-header", "x-data-bin", "x-sent"} {
			if got, want := again.header.Get(k), first.header.Get(k); fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
				t.Errorf("replay %d header %s = %q, want %q", i, k, got, want)
			}
		}
		if got, want := again.trailer.Get("x-trailer"), first.trailer.Get("x-trailer"); fmt.Sprint(got) != fmt.Sprint(want) || len(want) != 2 {
			t.Errorf("replay %d trailer = %q, want %q", i, got, want)
		}
	}
	h.wantCalls(t, 1)
}

func TestMismatch_NamesKeyAndFingerprints_StoresNothing(t *testing.T) {
	h := start(t)
	first := h.send("tok", "order-1001", payload("amount 100"))
	if first.err != nil {
		t.Fatal(first.err)
	}
	other := h.send("tok", "order-1001", payload("amount 999"))
	st := wantReason(t, other.err, codes.FailedPrecondition, wire.ReasonKeyReused)
	fpFirst, _ := once.NewFingerprint(testgrpc.TestService_UnaryCall_FullMethodName, payload("amount 100"))
	fpOther, _ := once.NewFingerprint(testgrpc.TestService_UnaryCall_FullMethodName, payload("amount 999"))
	for _, want := range []string{`"order-1001"`, fpFirst.Short(), fpOther.Short()} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not contain %s", st.Message(), want)
		}
	}
	again := h.send("tok", "order-1001", payload("amount 100"))
	if again.err != nil || !proto.Equal(again.resp, first.resp) || again.header.Get(wire.ReplayedHeader) == nil {
		t.Errorf("after the mismatch: %v %v %v, want the original replayed", again.resp, again.err, again.header)
	}
	h.wantCalls(t, 1)
}

func TestHandlerError_StoredAndReplayedWithDetails(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.Internal, codes.Unavailable} {
		t.Run(code.String(), func(t *testing.T) {
			h := start(t)
			h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
				grpc.SetTrailer(ctx, metadata.Pairs("x-why", "because"))
				st, _ := status.New(code, "handler failed").WithDetails(&errdetails.BadRequest{
					FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "must be positive"}},
				})
				return nil, st.Err()
			}
			first := h.send("tok", "k", payload("x"))
			again := h.send("tok", "k", payload("x"))
			if status.Code(first.err) != code {
				t.Fatalf("first: %v, want %v", first.err, code)
			}
			if !proto.Equal(status.Convert(again.err).Proto(), status.Convert(first.err).Proto()) {
				t.Errorf("replayed status = %v, want %v", status.Convert(again.err).Proto(), status.Convert(first.err).Proto())
			}
			if again.header.Get(wire.ReplayedHeader) == nil || again.trailer.Get("x-why") == nil {
				t.Errorf("replayed error lacks its marks: header %v trailer %v", again.header, again.trailer)
			}
			h.wantCalls(t, 1)
		})
	}
}

func TestConcurrentDuplicates_HandlerRunsOnce(t *testing.T) {
	h := start(t)
	release := make(chan struct{})
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		<-release
		return echo(ctx, req)
	}
	const n = 50
	answers := make([]call, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = h.send("tok", "k", payload("same")) })
	}
	time.Sleep(100 * time.Millisecond) // let most of them arrive while the first runs
	close(release)
	wg.Wait()
	var ok, inUse int
	for _, a := range answers {
		if a.err == nil {
			ok++
			if string(a.resp.Payload.Body) != "same" {
				t.Errorf("answer %v, want the one result", a.resp)
			}
			continue
		}
		st := wantReason(t, a.err, codes.Aborted, wire.ReasonKeyInUse)
		inUse++
		var retry *errdetails.RetryInfo
		for _, d := range st.Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r
			}
		}
		if retry == nil || retry.RetryDelay.AsDuration() <= 0 {
			t.Errorf("in-flight answer has RetryInfo %v, want a positive delay", retry)
		}
	}
	if ok == 0 || ok+inUse != n {
		t.Errorf("%d ok, %d in use of %d", ok, inUse, n)
	}
	h.wantCalls(t, 1)
}

func TestTakeover_ExclusiveStore_LiveWorkerIsNeverTakenOver(t *testing.T) {
	// The bbolt store is this process's alone: it knows its worker is alive,
	// however long past its lease it runs.
	h := start(t, interceptor.WithLease(10*time.Second))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	h.clock.Advance(time.Hour)
	wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)
	close(release)
	if a := <-first; a.err != nil {
		t.Fatalf("the live worker: %v, want its result", a.err)
	}
	if a := h.send("tok", "k", payload("x")); a.err != nil || !a.replayed() {
		t.Errorf("retry: replayed %t, %v; want the worker's result", a.replayed(), a.err)
	}
	h.wantCalls(t, 1)
}

func TestTakeover_SharedStore_SupersededAttemptIsRefused(t *testing.T) {
	// A store shared by processes cannot tell a slow worker from a dead one:
	// the lease decides.
	h := startWith(t, func(*boltstore.DB) storage.Store { return memstore.New() }, interceptor.WithLease(10*time.Second))
	firstRunning, releaseFirst := make(chan struct{}), make(chan struct{})
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		attempt, _ := once.AttemptFrom(ctx)
		grpc.SetHeader(ctx, metadata.Pairs("x-attempt", fmt.Sprint(attempt)))
		if attempt == 1 {
			close(firstRunning)
			<-releaseFirst
		}
		return &testgrpc.SimpleResponse{Username: fmt.Sprintf("attempt %d", attempt)}, nil
	}
	firstDone := make(chan call)
	go func() { firstDone <- h.send("tok", "k", payload("x")) }()
	<-firstRunning

	wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)
	h.clock.Advance(10 * time.Second) // the first worker's lease ends
	second := h.send("tok", "k", payload("x"))
	if second.err != nil || second.resp.Username != "attempt 2" {
		t.Fatalf("takeover = %v, %v; want attempt 2's response", second.resp, second.err)
	}

	close(releaseFirst)
	first := <-firstDone
	wantReason(t, first.err, codes.Aborted, wire.ReasonAttemptSuperseded)
	if got := first.header.Get("x-attempt"); got != nil {
		t.Errorf("superseded attempt sent its header %v", got)
	}
	for range 2 {
		again := h.send("tok", "k", payload("x"))
		if again.err != nil || again.resp.Username != "attempt 2" || fmt.Sprint(again.header.Get("x-attempt")) != "[2]" {
			t.Errorf("replay = %v %v %v, want attempt 2's result", again.resp, again.err, again.header)
		}
	}
	h.wantCalls(t, 2)
}

func TestExpiry_KeyRunsFreshAfterTTL(t *testing.T) {
	h := start(t, interceptor.WithTTL(time.Hour), interceptor.WithLease(time.Minute))
	h.send("tok", "k", payload("x"))
	h.clock.Advance(time.Hour - time.Nanosecond)
	if a := h.send("tok", "k", payload("other")); status.Code(a.err) != codes.FailedPrecondition {
		t.Fatalf("before expiry: %v, want FAILED_PRECONDITION", a.err)
	}
	h.clock.Advance(time.Nanosecond)
	a := h.send("tok", "k", payload("other"))
	if a.err != nil || string(a.resp.Payload.Body) != "other" || a.header.Get(wire.ReplayedHeader) != nil {
		t.Fatalf("after expiry: %v %v, want a fresh run", a.resp, a.err)
	}
	h.wantCalls(t, 2)
}

func TestStoreFailure_UnavailableAndHandlerNotRun(t *testing.T) {
	h := start(t)
	h.db.Close()
	a := h.send("tok", "k", payload("x"))
	if status.Code(a.err) != codes.Unavailable {
		t.Errorf("with the store closed: %v, want UNAVAILABLE", a.err)
	}
	h.wantCalls(t, 0)
}

func TestScopes_SameKeyTwoCredentials_TwoRecords(t *testing.T) {
	h := start(t)
	a := h.send("alice", "k", payload("x"))
	b := h.send("bob", "k", payload("y"))
	if a.err != nil || b.err != nil || b.header.Get(wire.ReplayedHeader) != nil {
		t.Fatalf("alice %v, bob %v %v: want two fresh runs", a.err, b.err, b.header)
	}
	h.wantCalls(t, 2)
}

func TestCredential_MissingOrMalformed_Unauthenticated(t *testing.T) {
	h := start(t)
	for name, kv := range map[string][]string{
		"none":       {wire.KeyHeader, "k"},
		"not bearer": {"authorization", "Basic abc", wire.KeyHeader, "k"},
		"empty":      {"authorization", "Bearer ", wire.KeyHeader, "k"},
		"twice":      {"authorization", "Bearer a", "authorization", "Bearer b", wire.KeyHeader, "k"},
		// The credential is checked before the key is even read.
		"bad key too": {wire.KeyHeader, ""},
	} {
		if a := h.call(payload("x"), kv...); status.Code(a.err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, a.err)
		}
	}
	h.wantCalls(t, 0)
}

func TestKey_Validation(t *testing.T) {
	h := start(t)
	printable := strings.Repeat("k", wire.MaxKeyLength-95)
	for c := byte(0x20); c <= 0x7e; c++ {
		printable += string(c)
	}
	if a := h.send("tok", printable, payload("x")); a.err != nil {
		t.Errorf("255 printable characters: %v, want accepted", a.err)
	}
	for name, kv := range map[string][]string{
		"256 characters": {wire.KeyHeader, strings.Repeat("k", 256)},
		"empty":          {wire.KeyHeader, ""},
		"sent twice":     {wire.KeyHeader, "a", wire.KeyHeader, "b"},
		"as binary":      {wire.KeyHeader + "-bin", "k"},
	} {
		t.Run(name, func(t *testing.T) {
			a := h.call(payload("x"), append([]string{"authorization", "Bearer tok"}, kv...)...)
			wantReason(t, a.err, codes.InvalidArgument, wire.ReasonKeyInvalid)
		})
	}
	wantReason(t, h.call(payload("x"), "authorization", "Bearer tok").err, codes.InvalidArgument, wire.ReasonKeyMissing)
	h.wantCalls(t, 1)
}

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"order-1001", true},
		{"~ ~", true},
		{" order-1001", false}, // over HTTP, the key order-1001
		{"order-1001 ", false},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
		{"", false},
		{"tab\there", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"café", false},
		{`"order-1001"`, false}, // over HTTP, the key order-1001
		{`"`, false},
		{`order "1001"`, true},
	} {
		if err := wire.ValidateKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("ValidateKey(%q) = %v, want ok %t", tc.key, err, tc.ok)
		}
	}
}

func TestKeyPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy    interceptor.KeyPolicy
		withKey   int64 // handler runs for two calls with one key
		withoutOK bool  // whether a call without a key is accepted
	}{
		{interceptor.KeyRequired, 1, false},
		{interceptor.KeyOptional, 1, true},
		{interceptor.KeyIgnored, 2, true},
	} {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			h := start(t, interceptor.WithKeyPolicy(testgrpc.TestService_UnaryCall_FullMethodName, tc.policy))
			h.send("tok", "k", payload("x"))
			h.send("tok", "k", payload("x"))
			h.wantCalls(t, tc.withKey)
			a := h.call(payload("x"))
			if (a.err == nil) != tc.withoutOK {
				t.Errorf("call without key or credential: %v, want ok %t", a.err, tc.withoutOK)
			}
		})
	}
}

func TestFingerprint_DeterministicAndMethodBound(t *testing.T) {
	req := &testgrpc.SimpleRequest{ResponseSize: 7, Payload: &testgrpc.Payload{Body: []byte("b")}, FillUsername: true}
	// The same fields in reverse wire order decode to an equal message.
	var reversed []byte
	for b := marshal(t, req); len(b) > 0; {
		_, _, n := protowire.ConsumeField(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		reversed = append(append([]byte(nil), b[:n]...), reversed...)
		b = b[n:]
	}
	if string(reversed) == string(marshal(t, req)) {
		t.Fatal("reversing the fields changed nothing; the test needs several fields")
	}
	var reordered testgrpc.SimpleRequest
	if err := proto.Unmarshal(reversed, &reordered); err != nil {
		t.Fatal(err)
	}
	a, _ := once.NewFingerprint("/s/M", req)
	b, _ := once.NewFingerprint("/s/M", &reordered)
	c, _ := once.NewFingerprint("/s/N", req)
	if a != b {
		t.Errorf("field order changed the fingerprint: %v vs %v", a, b)
	}
	if a == c {
		t.Errorf("two methods share fingerprint %v", a)
	}
}

// grpc-go clients refuse to send control or non-ASCII characters in
// metadata, so other clients' keys are fed to the interceptor directly.
func TestKey_ControlOrNonASCII_InvalidAndNotRun(t *testing.T) {
	h := start(t)
	intercept := interceptor.MustUnaryServerInterceptor(h.db, interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	for _, key := range []string{"tab\there", "caf\xc3\xa9", "nul\x00", "del\x7f", "\xff"} {
		ctx := metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer tok", wire.KeyHeader, key))
		_, err := intercept(ctx, payload("x"), info, func(ctx context.Context, req any) (any, error) {
			t.Errorf("key %q: handler ran", key)
			return nil, nil
		})
		wantReason(t, err, codes.InvalidArgument, wire.ReasonKeyInvalid)
	}
}

func TestExpiresAt_OnEveryAnswerAboutARecord(t *testing.T) {
	h := start(t, interceptor.WithTTL(2*time.Hour))
	want := h.clock.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	release := make(chan struct{})
	running := make(chan struct{})
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if string(req.Payload.Body) == "slow" {
			close(running)
			<-release
		}
		return echo(ctx, req)
	}
	fresh := h.send("tok", "k", payload("x"))
	h.clock.Advance(time.Minute) // the expiry is the first claim's, not the answer's
	answers := map[string]call{
		"fresh":    fresh,
		"replay":   h.send("tok", "k", payload("x")),
		"mismatch": h.send("tok", "k", payload("y")),
	}
	slow := make(chan call, 1)
	go func() { slow <- h.send("tok", "slow", payload("slow")) }()
	<-running
	answers["in flight"] = h.send("tok", "slow", payload("slow"))
	close(release)
	<-slow
	for name, a := range answers {
		if got := a.header.Get(wire.ExpiresAtHeader); len(got) != 1 || (name != "in flight" && got[0] != want) {
			t.Errorf("%s: %s = %v, want [%s]", name, wire.ExpiresAtHeader, got, want)
		}
	}
	// Outside the layer (no key where one is optional), no such header.
	h2 := start(t, interceptor.WithDefaultKeyPolicy(interceptor.KeyOptional))
	if a := h2.call(payload("x"), "authorization", "Bearer tok"); a.err != nil || a.header.Get(wire.ExpiresAtHeader) != nil {
		t.Errorf("without a key: %v, header %v; want no expiry", a.err, a.header)
	}
}

func TestFingerprintExclude_IgnoredFieldsReplay(t *testing.T) {
	h := start(t, interceptor.WithFingerprintExclude(
		"grpc.testing.SimpleRequest.fill_username", // top level, say a trace id
		"grpc.testing.Payload.type",                // nested in payload
	))
	first := h.send("tok", "k", &testgrpc.SimpleRequest{FillUsername: true, Payload: &testgrpc.Payload{Body: []byte("b")}})
	again := h.send("tok", "k", &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Type: 1, Body: []byte("b")}})
	if first.err != nil || again.err != nil || !again.replayed() {
		t.Fatalf("differing only in excluded fields: %v, %v (replayed %t); want a replay", first.err, again.err, again.replayed())
	}
	other := h.send("tok", "k", &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("other")}})
	wantReason(t, other.err, codes.FailedPrecondition, wire.ReasonKeyReused)
	h.wantCalls(t, 1)
}

func TestFingerprintScheme_ChangeIsMismatchNotReplay(t *testing.T) {
	store := memstore.New()
	ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("authorization", "Bearer tok", wire.KeyHeader, "k")), transport{})
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) { runs++; return &testgrpc.SimpleResponse{}, nil }
	before := interceptor.MustUnaryServerInterceptor(store, interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))
	after := interceptor.MustUnaryServerInterceptor(store, interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired),
		interceptor.WithFingerprintExclude("grpc.testing.SimpleRequest.fill_username"))

	req := &testgrpc.SimpleRequest{ResponseSize: 1}
	if _, err := before(ctx, req, info, handler); err != nil {
		t.Fatal(err)
	}
	// The same request, fingerprinted under the new scheme, cannot be
	// compared with the old record: refused, not replayed nor run again.
	_, err := after(ctx, req, info, handler)
	st := wantReason(t, err, codes.FailedPrecondition, wire.ReasonKeyReused)
	if !strings.Contains(st.Message(), storage.FingerprintScheme) || !strings.Contains(st.Message(), "excluding") {
		t.Errorf("message %q does not name both schemes", st.Message())
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
}

func TestInFlightWait_DuplicateGetsTheReplay(t *testing.T) {
	h := start(t, interceptor.WithInFlightWait(time.Minute))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	dups := make(chan call, 5)
	for range cap(dups) {
		go func() { dups <- h.send("tok", "k", payload("x")) }()
	}
	time.Sleep(50 * time.Millisecond) // let the duplicates start waiting
	close(release)
	want := <-first
	for range cap(dups) {
		d := <-dups
		if d.err != nil || !d.replayed() || !proto.Equal(d.resp, want.resp) {
			t.Errorf("duplicate: %v %v (replayed %t), want the first's result replayed", d.resp, d.err, d.replayed())
		}
	}
	h.wantCalls(t, 1)
}

func TestInFlightWait_BoundedByWaitAndDeadline(t *testing.T) {
	h := start(t, interceptor.WithInFlightWait(50*time.Millisecond))
	running, release := h.service.blockFirstAttempt()
	defer close(release)
	go h.send("tok", "k", payload("x"))
	<-running
	wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)

	h2 := start(t, interceptor.WithInFlightWait(time.Hour))
	running2, release2 := h2.service.blockFirstAttempt()
	defer close(release2)
	go h2.send("tok", "k", payload("x"))
	<-running2
	ctx, cancel := context.WithTimeout(withKey(context.Background(), "tok", "k"), 100*time.Millisecond)
	defer cancel()
	if _, err := h2.client.UnaryCall(ctx, payload("x")); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("waiting past the caller's deadline: %v, want DEADLINE_EXCEEDED", err)
	}
}
