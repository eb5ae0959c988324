package main

// End-to-end tests: each starts the real paymentsd binary, built once by
// TestMain, on a loopback port and talks to it over gRPC.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"
)

func TestE2E_SeedDemo_FreshReplayMismatch(t *testing.T) {
	d := start(t, spec{})
	ctx := withCreds("merchant-demo", "order-1001")

	first := d.create(ctx, seedRequest("100000000"))
	if first.err != nil || first.replayed() {
		t.Fatalf("first create: %v (replayed %t)", first.err, first.replayed())
	}
	second := d.create(ctx, seedRequest("100000000"))
	if second.err != nil || !second.replayed() {
		t.Fatalf("second create: %v (replayed %t), want a marked replay", second.err, second.replayed())
	}
	if !bytes.Equal(deterministic(t, second.resp), deterministic(t, first.resp)) {
		t.Errorf("replay %v differs from the original %v", second.resp, first.resp)
	}

	third := d.create(ctx, seedRequest("999000000"))
	if status.Code(third.err) != codes.FailedPrecondition || reason(third.err) != wire.ReasonKeyReused {
		t.Fatalf("reused key: %v, want FAILED_PRECONDITION / %s", third.err, wire.ReasonKeyReused)
	}
	method := paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName
	stored, _ := once.NewFingerprint(method, seedRequest("100000000"))
	got, _ := once.NewFingerprint(method, seedRequest("999000000"))
	for _, want := range []string{`"order-1001"`, stored.Short(), got.Short()} {
		if msg := status.Convert(third.err).Message(); !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %s", msg, want)
		}
	}

	fourth := d.create(ctx, seedRequest("100000000"))
	if fourth.err != nil || !fourth.replayed() || !bytes.Equal(deterministic(t, fourth.resp), deterministic(t, first.resp)) {
		t.Errorf("after the rejection: %v %v, want the original replayed", fourth.resp, fourth.err)
	}
	if n := len(d.list(t, "merchant-demo")); n != 1 {
		t.Errorf("%d intents exist, want 1", n)
	}
}

func TestE2E_ConcurrentDuplicates_OneIntent(t *testing.T) {
	d := start(t, spec{})
	const n = 50
	answers := make([]answer, n)
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-ready
			answers[i] = d.createSeed("merchant-demo", "order-concurrent", "100000000")
		})
	}
	close(ready)
	wg.Wait()

	ids := map[string]int{}
	for _, a := range answers {
		if a.err == nil {
			ids[intentID(a)]++
			continue
		}
		if status.Code(a.err) != codes.Aborted || reason(a.err) != wire.ReasonKeyInUse {
			t.Errorf("answer %v, want the intent or ABORTED / %s", a.err, wire.ReasonKeyInUse)
		}
		hasRetry := false
		for _, d := range status.Convert(a.err).Details() {
			_, ok := d.(*errdetails.RetryInfo)
			hasRetry = hasRetry || ok
		}
		if !hasRetry {
			t.Errorf("in-flight answer without RetryInfo: %v", a.err)
		}
	}
	if len(ids) != 1 {
		t.Errorf("answers carry intents %v, want exactly one id", ids)
	}
	if got := d.list(t, "merchant-demo"); len(got) != 1 {
		t.Errorf("%d intents exist, want 1", len(got))
	}
}

// Cancels of one intent under different keys race: each reads the intent
// as created, and all but one find it canceled when they commit. Each must
// be answered as if they had run one after another.
func TestE2E_ConcurrentCancels_EachAnsweredWithTheOneCancellation(t *testing.T) {
	d := start(t, spec{})
	for round := range 5 {
		a := d.createSeed("merchant-demo", fmt.Sprintf("order-%d", round), "100000000")
		if a.err != nil {
			t.Fatal(a.err)
		}
		id := intentID(a)
		const n = 12
		canceled := make([]*paymentsv1.PaymentIntent, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-ready
				ctx := withCreds("merchant-demo", fmt.Sprintf("cancel-%d-%d", round, i))
				resp, err := d.client.CancelPaymentIntent(ctx, &paymentsv1.CancelPaymentIntentRequest{Id: id})
				canceled[i], errs[i] = resp.GetPaymentIntent(), err
			})
		}
		close(ready)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: cancel %d: %v", round, i, err)
			}
			if canceled[i].State != paymentsv1.State_STATE_CANCELED || !proto.Equal(canceled[i], canceled[0]) {
				t.Errorf("round %d: cancel %d answered %v, want the one cancellation %v", round, i, canceled[i], canceled[0])
			}
		}
	}
}

func TestE2E_InvalidRequest_ErrorStoredAndReplayed(t *testing.T) {
	d := start(t, spec{})
	ctx := withCreds("merchant-demo", "order-zero")
	first := d.create(ctx, seedRequest("0"))
	st := status.Convert(first.err)
	var bad *errdetails.BadRequest
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			bad = br
		}
	}
	if st.Code() != codes.InvalidArgument || bad == nil || bad.FieldViolations[0].Field != "amount" {
		t.Fatalf("amount 0: %v, want INVALID_ARGUMENT with a BadRequest on amount", first.err)
	}
	again := d.create(ctx, seedRequest("0"))
	if !again.replayed() || !proto.Equal(status.Convert(again.err).Proto(), st.Proto()) {
		t.Errorf("retry: %v (replayed %t), want the same error replayed", again.err, again.replayed())
	}
	// A fixed body with the same key is a different request: the client
	// must choose a new key knowingly.
	if fixed := d.create(ctx, seedRequest("1")); status.Code(fixed.err) != codes.FailedPrecondition {
		t.Errorf("fixed body, same key: %v, want FAILED_PRECONDITION", fixed.err)
	}
}

func TestE2E_CredentialAndKeyErrors_StoreNothing(t *testing.T) {
	d := start(t, spec{})
	body := seedRequest("100000000")

	if a := d.create(withCreds("", "k-1"), body); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("no credential: %v, want UNAUTHENTICATED", a.err)
	}
	if a := d.create(withCreds("merchant-demo", ""), body); status.Code(a.err) != codes.InvalidArgument || reason(a.err) != wire.ReasonKeyMissing {
		t.Errorf("no key: %v, want INVALID_ARGUMENT / %s", a.err, wire.ReasonKeyMissing)
	}
	for name, key := range map[string]string{
		"256 characters": strings.Repeat("k", 256),
		"empty":          "",
	} {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(
			"authorization", "Bearer merchant-demo", wire.KeyHeader, key))
		if a := d.create(ctx, body); status.Code(a.err) != codes.InvalidArgument || reason(a.err) != wire.ReasonKeyInvalid {
			t.Errorf("key %s: %v, want INVALID_ARGUMENT / %s", name, a.err, wire.ReasonKeyInvalid)
		}
	}
	if n := len(d.list(t, "merchant-demo")); n != 0 {
		t.Fatalf("rejected requests created %d intents", n)
	}
	// Nothing was stored: the keys all run fresh now, with another body.
	other := seedRequest("7")
	for _, key := range []string{"k-1", strings.Repeat("k", 255)} {
		if a := d.create(withCreds("merchant-demo", key), other); a.err != nil || a.replayed() {
			t.Errorf("key %.10s… after rejections: %v (replayed %t), want fresh", key, a.err, a.replayed())
		}
	}
}

func TestE2E_Principals_Isolated(t *testing.T) {
	d := start(t, spec{})
	alice := d.createSeed("alice-token", "order-1", "100")
	bob := d.createSeed("bob-token", "order-1", "100")
	if alice.err != nil || bob.err != nil || bob.replayed() {
		t.Fatalf("alice %v, bob %v (replayed %t)", alice.err, bob.err, bob.replayed())
	}
	aliceID := intentID(alice)
	if bobID := intentID(bob); bobID == aliceID {
		t.Fatalf("one key under two credentials gave one intent %s", aliceID)
	}
	_, err := d.client.GetPaymentIntent(withCreds("bob-token", ""), &paymentsv1.GetPaymentIntentRequest{Id: aliceID})
	if status.Code(err) != codes.NotFound {
		t.Errorf("bob reads alice's intent: %v, want NOT_FOUND", err)
	}
	_, err = d.client.CancelPaymentIntent(withCreds("bob-token", "c-1"), &paymentsv1.CancelPaymentIntentRequest{Id: aliceID})
	if status.Code(err) != codes.NotFound {
		t.Errorf("bob cancels alice's intent: %v, want NOT_FOUND", err)
	}
	for _, pi := range d.list(t, "bob-token") {
		if pi.Id == aliceID {
			t.Errorf("bob's list shows alice's intent %s", aliceID)
		}
	}
	if got := d.list(t, "alice-token"); len(got) != 1 || got[0].Id != aliceID {
		t.Errorf("alice's list = %v, want her one intent", got)
	}
	// Guessing alice's key and body replays nothing of hers to mallory.
	guess := d.createSeed("mallory-token", "order-1", "100")
	if guess.err != nil || guess.replayed() || intentID(guess) == aliceID {
		t.Errorf("mallory with alice's key and body: %v (replayed %t), want a fresh intent of mallory's own", guess.err, guess.replayed())
	}
}

func TestE2E_Restart_ReplaysAndLocksFile(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "data", "paymentsd.db")
	const token = "sk-live-e2e-0123456789abcdef"
	d := start(t, spec{db: dbPath})
	first := d.createSeed(token, "order-restart", "100000000")
	if first.err != nil {
		t.Fatal(first.err)
	}

	// A second process on the same file fails at once, naming it.
	second := start(t, spec{db: dbPath, noWait: true})
	if code := second.exitCode(t, 30*time.Second); code == 0 {
		t.Errorf("second paymentsd exited with %v, want a non-zero status", second.err)
	}
	if !strings.Contains(second.stderr(), dbPath) {
		t.Errorf("second paymentsd's error does not name %s:\n%s", dbPath, second.stderr())
	}

	d = d.restart(t)
	again := d.createSeed(token, "order-restart", "100000000")
	if again.err != nil || !again.replayed() || !bytes.Equal(deterministic(t, again.resp), deterministic(t, first.resp)) {
		t.Errorf("after restart: %v %v (replayed %t), want the original replayed", again.resp, again.err, again.replayed())
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	info, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("data file mode %v, want 0600", mode)
	}
	data, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(token)) {
		t.Errorf("the data file contains the bearer token")
	}
	if strings.Contains(d.stderr(), token) {
		t.Errorf("the log contains the bearer token")
	}
}

func TestE2E_APIKeys_OnlyListedCredentials(t *testing.T) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("alice-secret"))
	keys := filepath.Join(dir, "api-keys")
	if err := os.WriteFile(keys, []byte("# principal sha256:<hex>\nalice sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := start(t, spec{args: []string{"--api-keys", keys}})
	if strings.Contains(d.stderr(), "dev mode") {
		t.Errorf("paymentsd warns of dev mode although --api-keys is set")
	}
	if !strings.Contains(d.stderr(), `"msg":"api keys loaded"`) || !strings.Contains(d.stderr(), `"principals":1`) {
		t.Errorf("start log does not say how many principals were loaded:\n%s", d.stderr())
	}
	if a := d.createSeed("mallory-secret", "k", "1"); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("unknown token: %v, want UNAUTHENTICATED", a.err)
	}
	if a := d.createSeed("alice-secret", "k", "1"); a.err != nil {
		t.Errorf("listed token: %v", a.err)
	}
}

func TestE2E_DevModeWarns(t *testing.T) {
	d := start(t, spec{})
	if !strings.Contains(d.stderr(), "dev mode") {
		t.Errorf("no dev mode warning in:\n%s", d.stderr())
	}
}

func TestE2E_ReflectionAndHealth(t *testing.T) {
	d := start(t, spec{})
	conn := d.dial(t, nil)
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || health.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check = %v, %v; want SERVING (without credentials)", health, err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !slices.Contains(names, paymentsv1.PaymentIntentService_ServiceDesc.ServiceName) {
		t.Errorf("reflection lists %v, want PaymentIntentService among them", names)
	}

	// The descriptors carry the protos' comments, for grpcurl describe.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "payments.v1.CreatePaymentIntentRequest"},
	}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Recv(); err != nil {
		t.Fatal(err)
	}
	documented := false
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
			documented = documented || strings.Contains(loc.GetLeadingComments(), "base units")
		}
	}
	if !documented {
		t.Error("reflection serves payment_intent.proto without its comments")
	}
}

func TestE2E_LogsOneLinePerRPC(t *testing.T) {
	d := start(t, spec{})
	ctx := withCreds("merchant-demo", "order-log")
	d.create(ctx, seedRequest("5"))
	d.create(ctx, seedRequest("5"))
	d.stop(t) // every line is written once it has exited

	if bad := d.notJSON(); len(bad) > 0 {
		t.Fatalf("log lines that are not JSON: %q", bad)
	}
	var got []string
	for _, l := range d.lines("rpc") {
		var line struct {
			Method, Code, Idempotency string
			Attempt                   uint64
			DurationMS                *float64 `json:"duration_ms"`
		}
		if err := l.decode(&line); err != nil {
			t.Fatalf("rpc line %v: %v", l, err)
		}
		if line.DurationMS == nil || line.Method != paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName {
			t.Errorf("rpc line %v lacks a method or duration", l)
		}
		got = append(got, fmt.Sprintf("%s %s %d", line.Code, line.Idempotency, line.Attempt))
	}
	if want := []string{"OK fresh 1", "OK replay 1"}; !slices.Equal(got, want) {
		t.Errorf("rpc log lines %q, want %q", got, want)
	}
}

func TestE2E_SweeperRemovesExpiredRecords(t *testing.T) {
	d := start(t, spec{args: []string{"--ttl", "1s", "--lease", "500ms", "--sweep-interval", "50ms"}})
	first := d.createSeed("merchant-demo", "order-short", "5")
	if first.err != nil {
		t.Fatal(first.err)
	}
	d.waitLine(t, "swept expired idempotency records", nil, 30*time.Second)
	// The record is gone: the key runs fresh, and another intent is made.
	again := d.createSeed("merchant-demo", "order-short", "5")
	if again.err != nil || again.replayed() {
		t.Errorf("after expiry: %v (replayed %t), want a fresh run", again.err, again.replayed())
	}
	if n := len(d.list(t, "merchant-demo")); n != 2 {
		t.Errorf("%d intents, want 2", n)
	}
}

// TestE2E_ClientRetriesThroughChaos_ExactlyOneIntentEach creates intents
// through a fault proxy (testkit/faultproxy) that loses responses
// after the server handled them, or resets connections, with the client
// interceptor retrying: every caller gets its intent, and no create ran
// twice.
func TestE2E_ClientRetriesThroughChaos_ExactlyOneIntentEach(t *testing.T) {
	for _, tc := range []struct {
		name      string
		configure func(*faultproxy.Proxy)
	}{
		// Half the writes of 100 bytes or more (responses; HTTP/2 settings,
		// pings and window updates are smaller) swallowed, the connection cut.
		{"responses dropped after handling", func(p *faultproxy.Proxy) { p.DropReplies(100, 0.5) }},
		// Each connection reset after a random lifetime up to 20ms.
		{"connections reset", func(p *faultproxy.Proxy) { p.LimitLifetime(20 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := start(t, spec{})
			proxy, err := faultproxy.New(d.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			tc.configure(proxy)
			const creates = 200
			ids := createThroughChaos(t, retryingClient(t, proxy.Addr()), creates)
			if proxy.Cuts() == 0 {
				t.Fatal("the proxy broke nothing: the test proved nothing")
			}
			intents := d.list(t, "chaos")
			perAmount := map[string]int{}
			for _, pi := range intents {
				perAmount[pi.Amount]++
				if ids[pi.Id] == "" {
					t.Errorf("intent %s (amount %s) was created but never returned", pi.Id, pi.Amount)
				}
			}
			for amount, n := range perAmount {
				if n != 1 {
					t.Errorf("amount %s: %d intents", amount, n)
				}
			}
			if len(intents) != creates || len(ids) != creates {
				t.Errorf("%d intents exist and %d were returned, want %d and %d", len(intents), len(ids), creates, creates)
			}
			t.Logf("%d creates, %d broken by the proxy, %d intents, 0 duplicates", creates, proxy.Cuts(), len(intents))
		})
	}
}

// retryingClient is a client of addr whose creates the client interceptor
// retries, reconnecting at once.
func retryingClient(t *testing.T, addr string) paymentsv1.PaymentIntentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond,
		}}),
		grpc.WithUnaryInterceptor(retry.MustUnaryClientInterceptor(
			retry.WithMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
			// About 20 s of retries: a loaded CI machine made
			// 50 within 2.5 s too few to outlast the proxy.
			retry.WithMaxAttempts(200),
			retry.WithBackoff(2*time.Millisecond, 100*time.Millisecond),
		)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return paymentsv1.NewPaymentIntentServiceClient(conn)
}

// createThroughChaos makes creates of the amounts 1 to n as chaos's, 8 at
// a time, each without a key of its own (the interceptor chooses one),
// and returns the intents returned, each to its amount.
func createThroughChaos(t *testing.T, client paymentsv1.PaymentIntentServiceClient, n int64) map[string]string {
	const workers = 8
	var (
		mu  sync.Mutex
		ids = map[string]string{} // intent id -> amount
		wg  sync.WaitGroup
		nxt atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for {
				i := nxt.Add(1)
				if i > n {
					return
				}
				amount := strconv.FormatInt(i, 10)
				resp, err := client.CreatePaymentIntent(withCreds("chaos", ""), seedRequest(amount))
				if err != nil {
					t.Errorf("create %s: %v", amount, err)
					continue
				}
				mu.Lock()
				ids[resp.PaymentIntent.Id] = amount
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids
}
