package main

// Hostile conditions against the real binary: damaged data files, a disk
// that fills up, fsyncs slowed by strace's fault injection, clients that
// walk away, a bounded shutdown.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/wire"
)

// changeWithDD sets the byte at offset of every occurrence of marker in the
// file at path to b, with dd, and returns how many it changed.
func changeWithDD(t *testing.T, path string, marker []byte, offset int, b byte) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for at := 0; ; at++ {
		i := bytes.Index(data[at:], marker)
		if i < 0 {
			return n
		}
		at += i
		dd := exec.Command("dd", "of="+path, "bs=1", "count=1", "conv=notrunc", fmt.Sprint("seek=", at+offset))
		dd.Stdin = bytes.NewReader([]byte{b})
		if out, err := dd.CombinedOutput(); err != nil {
			t.Fatalf("dd: %v\n%s", err, out)
		}
		n++
	}
}

func TestE2E_DamagedDataFile_RefusedAtStartNamingFileAndRemedy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"zeroed pages in the middle", func(t *testing.T, path string) { damageWithDD(t, path, filePages(t, path)/2, 32) }},
		{"truncated to half", func(t *testing.T, path string) { truncate(t, path, bolttest.UsedSize(t, path)/2) }},
		{"truncated by 10%", func(t *testing.T, path string) { truncate(t, path, bolttest.UsedSize(t, path)*9/10) }},
		{"every page after the metas zeroed", func(t *testing.T, path string) { damageWithDD(t, path, 2, filePages(t, path)-2) }},
		{"emptied", func(t *testing.T, path string) { truncate(t, path, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := bigDataFile(t)
			tc.damage(t, path)
			d := start(t, spec{db: path, noWait: true})
			d.exitCode(t, 60*time.Second) // a damaged file is refused, never served
			log := d.stderr()
			if d.err == nil || strings.Contains(log, "goroutine ") || strings.Contains(log, "SIGBUS") || strings.Contains(log, "fatal error") {
				t.Errorf("exit %v; want a refusal, not a crash:\n%s", d.err, log)
			}
			for _, want := range []string{path, "damaged", "backup", "check"} {
				if !strings.Contains(log, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, log)
				}
			}
		})
	}
}

// A stored answer and intent whose bytes changed on disk, an amount of
// 100000000 become 900000000 with dd, are never served as another answer:
// the retry and the read get DATA_LOSS, and check names the damage.
func TestE2E_ByteChangedOnDisk_DataLossNeverAnotherAmount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	d := start(t, spec{db: path})
	ctx := withCreds("merchant-demo", "order-flip")
	a := d.create(ctx, seedRequest("100000000"))
	if a.err != nil {
		t.Fatal(a.err)
	}
	id := intentID(a)
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// Every copy: the record's, the intent's, freed pages'.
	if n := changeWithDD(t, path, []byte("100000000"), 0, '9'); n < 2 {
		t.Fatalf("the amount is in the file %d times, want the record's and the intent's", n)
	}

	d = start(t, spec{db: path})
	if again := d.create(ctx, seedRequest("100000000")); status.Code(again.err) != codes.DataLoss {
		t.Errorf("retry: %v, %v; want DATA_LOSS", again.resp, again.err)
	}
	got, err := d.client.GetPaymentIntent(withCreds("merchant-demo", ""), &paymentsv1.GetPaymentIntentRequest{Id: id})
	if status.Code(err) != codes.DataLoss {
		t.Errorf("get: %v, %v; want DATA_LOSS", got, err)
	}
	d.waitAdmin(t)
	paymentsd(t, "", "check", "--db", path).want(t, 1, "checksum mismatch")
	r := paymentsd(t, "", "record", "--db", path, "--principal", devPrincipal("merchant-demo"), "--key", "order-flip")
	if r.code != 1 || !strings.Contains(r.stderr, "checksum mismatch") {
		t.Errorf("record of the damaged key through the server: exit %d, stderr:\n%s\nwant 1 naming the damage", r.code, r.stderr)
	}
}

// A byte changed on disk inside a stored idempotency key, order-1001 read as
// order-1002, would make a retry of order-1001 find it free and charge
// again, and order-1002 replay a stranger's intent. The file is refused at
// start, and check and record say it is damaged.
func TestE2E_KeyByteChangedOnDisk_RefusedAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	d := start(t, spec{db: path})
	if a := d.createSeed("merchant-demo", "order-1001", "100000000"); a.err != nil {
		t.Fatal(a.err)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	if changeWithDD(t, path, []byte("order-1001"), len("order-100"), '2') == 0 {
		t.Fatal("the key is not in the file")
	}
	d = start(t, spec{db: path, noWait: true})
	d.exitCode(t, 60*time.Second) // a file with a damaged key is refused, never served
	if log := d.stderr(); d.err == nil || !strings.Contains(log, "not the key") || !strings.Contains(log, "backup") {
		t.Errorf("exit %v; want a refusal naming the damaged key and a backup:\n%s", d.err, log)
	}
	paymentsd(t, "", "check", "--db", path).want(t, 1, "damaged", "not the key")
	r := paymentsd(t, "", "record", "--db", path, "--principal", devPrincipal("merchant-demo"), "--key", "order-1002")
	if r.code != 1 || !strings.Contains(r.stderr, "damaged") {
		t.Errorf("record of the key the damage made: exit %d, stderr:\n%s\nwant 1 saying the file is damaged", r.code, r.stderr)
	}
}

func TestE2E_PagesDamagedWhileServing_DataLossNotServingStillAlive(t *testing.T) {
	path := bigDataFile(t)
	d := start(t, spec{db: path})
	if got := len(d.list(t, hostileToken)); got != 1000 {
		t.Fatalf("before the damage: %d intents listed, want a page of 1000", got)
	}
	damageWithDD(t, path, 2, filePages(t, path)-2) // under the running server

	_, err := d.client.ListPaymentIntents(withCreds(hostileToken, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000})
	if code := status.Code(err); code != codes.DataLoss && code != codes.Internal {
		t.Errorf("List over damaged pages: %v, want DATA_LOSS or INTERNAL", err)
	}
	a := d.createSeed(hostileToken, "after-damage", "5")
	if a.err == nil {
		t.Errorf("create on a damaged file succeeded, want an error")
	}
	waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
	d.wantRunning(t, "on a damaged file")
	if log := d.stderr(); !strings.Contains(log, "damaged") || strings.Contains(log, "goroutine ") {
		t.Errorf("log does not report the damage, or shows a panic:\n%s", log)
	}
}

func TestE2E_DiskFull_NotServingUntilSpaceReturns(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	d := start(t, spec{db: filepath.Join(dir, "paymentsd.db"), metrics: true})
	if got := healthStatus(t, d); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health at start: %v", got)
	}
	filler := fillUntilFull(t, dir)
	for i := 0; ; i++ { // until a commit needs a page the file lacks
		if i == 50 {
			t.Fatal("50 creates succeeded on a full disk")
		}
		if a := d.createSeed(hostileToken, fmt.Sprint("full-", i), fmt.Sprint(i+1)); status.Code(a.err) == codes.Unavailable {
			break
		}
	}
	waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
	const service = "payments.v1.PaymentIntentService"
	if got := serviceHealth(t, d, service); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health of %s with the disk full: %v, want NOT_SERVING", service, got)
	}
	if code := d.healthz(t); code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthz with the disk full = %d, want 503", code)
	}
	errs := `idempotency_store_errors_total{grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService"}`
	if n := d.scrape(t)[errs]; n < 1 {
		t.Errorf("%s = %v with the disk full, want at least 1", errs, n)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
	if code := d.healthz(t); code != http.StatusOK {
		t.Errorf("GET /healthz once space returned = %d, want 200", code)
	}
	if got := serviceHealth(t, d, service); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of %s once space returned: %v, want SERVING", service, got)
	}
	if a := d.createSeed(hostileToken, "after-space-returns", "77"); a.err != nil {
		t.Errorf("create once space returned: %v", a.err)
	}
}

func TestE2E_APIKeys_OneHashUnderTwoPrincipals_RefusedNamingBothLines(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "api-keys")
	line := func(principal string) string { return principal + " sha256:" + sha256Hex("shared-token") + "\n" }
	if err := os.WriteFile(keys, []byte(line("acme")+line("globex")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := start(t, spec{args: []string{"--api-keys", keys}, noWait: true})
	<-d.exited
	if log := d.stderr(); d.err == nil || !strings.Contains(log, keys+":2") || !strings.Contains(log, "line 1") {
		t.Errorf("exit %v, log:\n%s\nwant a refusal naming %s:2 and line 1", d.err, log, keys)
	}
}

// A client that gives up after 2 ms while every fsync takes 200 ms, and a
// client interceptor whose attempts time out after 20 ms, a tenth of one
// commit: the abandoned create still completes, and every key ends with
// exactly one intent. (strace stops the process at every system call, so
// under it even a replay can take more than 2 ms: attempts that short could
// time out forever.)
func TestE2E_SlowDiskImpatientClients_OneIntentEachNoKeyLocked(t *testing.T) {
	d := start(t, spec{args: []string{"--in-flight-wait", "5s"}})
	slowFsync(t, d, 200*time.Millisecond)

	ctx, cancel := context.WithTimeout(withCreds(hostileToken, "impatient"), 2*time.Millisecond)
	_, err := d.client.CreatePaymentIntent(ctx, seedRequest("1"))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("2 ms deadline against 200 ms fsyncs: %v, want DEADLINE_EXCEEDED", err)
	}
	again := d.createSeed(hostileToken, "impatient", "1")
	if again.err != nil {
		t.Fatalf("retry of the abandoned create: %v, want the intent", again.err)
	}

	client := paymentsv1.NewPaymentIntentServiceClient(d.dial(t, nil,
		grpc.WithUnaryInterceptor(retry.MustUnaryClientInterceptor(
			retry.WithMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
			retry.WithAttemptTimeout(20*time.Millisecond), retry.WithMaxAttempts(20)))))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if _, err := client.CreatePaymentIntent(withCreds(hostileToken, ""), seedRequest(fmt.Sprint(100+i))); err != nil {
				t.Errorf("client interceptor with 20 ms attempts: %v, want the intent", err)
			}
		})
	}
	wg.Wait()
	if n := wantOneIntentPerAmount(t, d); n != 5 {
		t.Errorf("%d intents, want 5", n)
	}
}

// With --lease 1s and every fsync slowed to 400 ms, concurrent retried
// creates never see a live worker taken over.
func TestE2E_SlowDiskShortLease_NoLiveWorkerTakenOver(t *testing.T) {
	d := start(t, spec{args: []string{"--lease", "1s"}})
	slowFsync(t, d, 400*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := fmt.Sprint("slow-", i)
			for range 3 { // the same request three times, overlapping
				a := d.createSeed(hostileToken, key, fmt.Sprint(i+1))
				if reason(a.err) == wire.ReasonAttemptSuperseded {
					t.Errorf("key %s: a live worker was taken over: %v", key, a.err)
				}
			}
		})
	}
	wg.Wait()
	wantOneIntentPerAmount(t, d)
	if log := d.stderr(); strings.Contains(log, `"idempotency":"takeover"`) {
		t.Errorf("the log shows a takeover:\n%s", log)
	}
}

// With fsyncs slowed to 400 ms and calls in flight, SIGTERM with a 300 ms
// grace ends the process within the grace plus the commit in progress.
func TestE2E_ShutdownGrace_IsABound(t *testing.T) {
	d := start(t, spec{args: []string{"--shutdown-grace", "300ms"}})
	slowFsync(t, d, 400*time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				d.createSeed(hostileToken, fmt.Sprintf("grace-%d-%d", i, n), fmt.Sprint(i+1))
			}
		})
	}
	time.Sleep(time.Second)
	began := time.Now()
	err := d.stop(t) // fails t without an exit within a minute
	took := time.Since(began)
	close(stop)
	wg.Wait()
	t.Logf("exited %v after SIGTERM, grace 300ms, fsyncs 400ms", took.Round(time.Millisecond))
	// The bound: the grace, then the commit in progress (two fsyncs), with
	// room for strace's overhead on a loaded machine. Before the fix this
	// took 11.9 s.
	if took > 300*time.Millisecond+2*400*time.Millisecond+5*time.Second {
		t.Errorf("exit took %v, want within the 300ms grace plus the commit in progress", took)
	}
	if err != nil {
		t.Errorf("exit status %v, want 0:\n%s", err, d.stderr())
	}
}
