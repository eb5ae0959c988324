package main

// Hostile conditions against the real binary: damaged data files, a disk
// that fills up, fsyncs slowed by strace's fault injection, clients that
// walk away, a bounded shutdown.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/boltintents"
	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/internal/bolttest"
)

const hostileToken = "hostile-token"

// bigDataFile writes a paymentsd data file of at least 16 MiB: 2,000 intents
// of the principal of hostileToken, and 16 MiB of an embedder's data.
func bigDataFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	intents, err := boltintents.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	owner := devPrincipal(hostileToken)
	for i := range 2000 {
		pi := &paymentsv1.PaymentIntent{Id: fmt.Sprintf("pi_%024x", i), State: paymentsv1.State_STATE_CREATED, Version: 1,
			Amount: strconv.Itoa(i + 1), CreateTime: timestamppb.Now(), ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}
		if err := intents.CreateIntent(ctx, owner, pi); err != nil {
			t.Fatal(err)
		}
	}
	bolttest.Fill(t, db, "filler", 16)
	db.Close()
	if info, err := os.Stat(path); err != nil || info.Size() < 16<<20 {
		t.Fatalf("data file of %d bytes (%v), want at least 16 MiB", info.Size(), err)
	}
	return path
}

// devPrincipal is the principal dev mode gives token.
func devPrincipal(token string) string { return "dev:" + sha256Hex(token) }

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

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

// damageWithDD zeroes count 4 KiB pages of path from page seek, with dd.
func damageWithDD(t *testing.T, path string, seek, count int64) {
	t.Helper()
	out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4096", "conv=notrunc",
		fmt.Sprint("seek=", seek), fmt.Sprint("count=", count)).CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
}

// truncate cuts path to size bytes with truncate(1).
func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if out, err := exec.Command("truncate", "-s", fmt.Sprint(size), path).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v %s", err, out)
	}
}

func filePages(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() / 4096
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
			d := launch(t, path)
			select {
			case <-d.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("paymentsd still runs on a damaged file:\n%s", d.stderr())
			}
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
	d := startDaemon(t, path)
	ctx := withCreds("merchant-demo", "order-flip")
	a := d.create(ctx, seedRequest("100000000"))
	if a.err != nil {
		t.Fatal(a.err)
	}
	id := a.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// Every copy: the record's, the intent's, freed pages'.
	if n := changeWithDD(t, path, []byte("100000000"), 0, '9'); n < 2 {
		t.Fatalf("the amount is in the file %d times, want the record's and the intent's", n)
	}

	d = startDaemon(t, path)
	if again := d.create(ctx, seedRequest("100000000")); status.Code(again.err) != codes.DataLoss {
		t.Errorf("retry: %v, %v; want DATA_LOSS", again.resp, again.err)
	}
	got, err := d.client.GetPaymentIntent(withCreds("merchant-demo", ""), &paymentsv1.GetPaymentIntentRequest{Id: id})
	if status.Code(err) != codes.DataLoss {
		t.Errorf("get: %v, %v; want DATA_LOSS", got, err)
	}
	waitAdmin(t, d)
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
	d := startDaemon(t, path)
	if a := d.create(withCreds("merchant-demo", "order-1001"), seedRequest("100000000")); a.err != nil {
		t.Fatal(a.err)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	if changeWithDD(t, path, []byte("order-1001"), len("order-100"), '2') == 0 {
		t.Fatal("the key is not in the file")
	}
	d = launch(t, path)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("paymentsd serves a file with a damaged key:\n%s", d.stderr())
	}
	if log := d.stderr(); d.err == nil || !strings.Contains(log, "not the key") || !strings.Contains(log, "backup") {
		t.Errorf("exit %v; want a refusal naming the damaged key and a backup:\n%s", d.err, log)
	}
	paymentsd(t, "", "check", "--db", path).want(t, 1, "damaged", "not the key")
	r := paymentsd(t, "", "record", "--db", path, "--principal", devPrincipal("merchant-demo"), "--key", "order-1002")
	if r.code != 1 || !strings.Contains(r.stderr, "damaged") {
		t.Errorf("record of the key the damage made: exit %d, stderr:\n%s\nwant 1 saying the file is damaged", r.code, r.stderr)
	}
}

// healthStatus asks d's grpc.health.v1 for the server's status.
func healthStatus(t *testing.T, d *daemon) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	return serviceHealth(t, d, "")
}

// serviceHealth asks d's grpc.health.v1 for a service's status.
func serviceHealth(t *testing.T, d *daemon, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return h.Status
}

// waitHealth waits up to a minute for d to report want.
func waitHealth(t *testing.T, d *daemon, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got := healthStatus(t, d)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v after a minute, want %v:\n%s", got, want, d.stderr())
		}
	}
}

func TestE2E_PagesDamagedWhileServing_DataLossNotServingStillAlive(t *testing.T) {
	path := bigDataFile(t)
	d := startDaemon(t, path)
	if got := len(d.list(t, hostileToken)); got != 1000 {
		t.Fatalf("before the damage: %d intents listed, want a page of 1000", got)
	}
	damageWithDD(t, path, 2, filePages(t, path)-2) // under the running server

	_, err := d.client.ListPaymentIntents(withCreds(hostileToken, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000})
	if code := status.Code(err); code != codes.DataLoss && code != codes.Internal {
		t.Errorf("List over damaged pages: %v, want DATA_LOSS or INTERNAL", err)
	}
	a := d.create(withCreds(hostileToken, "after-damage"), seedRequest("5"))
	if a.err == nil {
		t.Errorf("create on a damaged file succeeded, want an error")
	}
	waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
	select {
	case <-d.exited:
		t.Fatalf("paymentsd died: %v\n%s", d.err, d.stderr())
	default:
	}
	if log := d.stderr(); !strings.Contains(log, "damaged") || strings.Contains(log, "goroutine ") {
		t.Errorf("log does not report the damage, or shows a panic:\n%s", log)
	}
}

func TestE2E_DiskFull_NotServingUntilSpaceReturns(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	d := startDaemon(t, filepath.Join(dir, "paymentsd.db"), "--metrics-listen", "127.0.0.1:0")
	if got := healthStatus(t, d); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health at start: %v", got)
	}
	filler := fillUntilFull(t, dir)
	for i := 0; ; i++ { // until a commit needs a page the file lacks
		if i == 50 {
			t.Fatal("50 creates succeeded on a full disk")
		}
		if a := d.create(withCreds(hostileToken, fmt.Sprint("full-", i)), seedRequest(fmt.Sprint(i+1))); status.Code(a.err) == codes.Unavailable {
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
	if n := scrape(t, d.metricsAddr(t))[errs]; n < 1 {
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
	if a := d.create(withCreds(hostileToken, "after-space-returns"), seedRequest("77")); a.err != nil {
		t.Errorf("create once space returned: %v", a.err)
	}
}

func TestE2E_APIKeys_OneHashUnderTwoPrincipals_RefusedNamingBothLines(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "api-keys")
	line := func(principal string) string { return principal + " sha256:" + sha256Hex("shared-token") + "\n" }
	if err := os.WriteFile(keys, []byte(line("acme")+line("globex")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := launch(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--api-keys", keys)
	<-d.exited
	if log := d.stderr(); d.err == nil || !strings.Contains(log, keys+":2") || !strings.Contains(log, "line 1") {
		t.Errorf("exit %v, log:\n%s\nwant a refusal naming %s:2 and line 1", d.err, log, keys)
	}
}

// slowFsync attaches strace to d, delaying every fdatasync and fsync of
// the real binary by delay, and detaches when the test ends.
func slowFsync(t *testing.T, d *daemon, delay time.Duration) {
	t.Helper()
	us := fmt.Sprint(delay.Microseconds())
	t.Cleanup(attachStrace(t, d, "-e", "trace=fdatasync,fsync", "-e", "inject=fdatasync:delay_enter="+us, "-e", "inject=fsync:delay_enter="+us))
}

// attachStrace attaches strace with args to d's threads, and returns the
// func that detaches it, leaving paymentsd running.
func attachStrace(t *testing.T, d *daemon, args ...string) (detach func()) {
	t.Helper()
	cmd := exec.Command("strace", append([]string{"-f", "-p", strconv.Itoa(d.cmd.Process.Pid), "-o", "/dev/null"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	detach = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), "attached") {
				once.Do(func() { close(attached) })
			}
		}
	}()
	select {
	case <-attached:
		time.Sleep(100 * time.Millisecond) // the other threads
	case <-time.After(30 * time.Second):
		detach()
		t.Fatal("strace did not attach")
	}
	return detach
}

// wantOneIntentPerAmount checks that hostileToken's intents, one amount per
// key in these tests, hold each amount once, and returns how many there are.
func wantOneIntentPerAmount(t *testing.T, d *daemon) int {
	t.Helper()
	byAmount := map[string]int{}
	for _, pi := range d.list(t, hostileToken) {
		byAmount[pi.Amount]++
	}
	for amount, n := range byAmount {
		if n != 1 {
			t.Errorf("amount %s: %d intents, want 1", amount, n)
		}
	}
	return len(byAmount)
}

// A client that gives up after 2 ms while every fsync takes 200 ms, and a
// client interceptor whose attempts time out after 20 ms, a tenth of one
// commit: the abandoned create still completes, and every key ends with
// exactly one intent. (strace stops the process at every system call, so
// under it even a replay can take more than 2 ms: attempts that short could
// time out forever.)
func TestE2E_SlowDiskImpatientClients_OneIntentEachNoKeyLocked(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--in-flight-wait", "5s")
	slowFsync(t, d, 200*time.Millisecond)

	ctx, cancel := context.WithTimeout(withCreds(hostileToken, "impatient"), 2*time.Millisecond)
	_, err := d.client.CreatePaymentIntent(ctx, seedRequest("1"))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("2 ms deadline against 200 ms fsyncs: %v, want DEADLINE_EXCEEDED", err)
	}
	retry := d.create(withCreds(hostileToken, "impatient"), seedRequest("1"))
	if retry.err != nil {
		t.Fatalf("retry of the abandoned create: %v, want the intent", retry.err)
	}

	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(interceptor.MustUnaryClientInterceptor(
			interceptor.WithClientMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
			interceptor.WithAttemptTimeout(20*time.Millisecond), interceptor.WithMaxAttempts(20))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := paymentsv1.NewPaymentIntentServiceClient(conn)
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
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--lease", "1s")
	slowFsync(t, d, 400*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := fmt.Sprint("slow-", i)
			for range 3 { // the same request three times, overlapping
				a := d.create(withCreds(hostileToken, key), seedRequest(fmt.Sprint(i+1)))
				if reason(a.err) == interceptor.ReasonAttemptSuperseded {
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
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--shutdown-grace", "300ms")
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
				d.create(withCreds(hostileToken, fmt.Sprintf("grace-%d-%d", i, n)), seedRequest(fmt.Sprint(i+1)))
			}
		})
	}
	time.Sleep(time.Second)
	start := time.Now()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatal("no exit within a minute of SIGTERM")
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	t.Logf("exited %v after SIGTERM, grace 300ms, fsyncs 400ms", took.Round(time.Millisecond))
	// The bound: the grace, then the commit in progress (two fsyncs), with
	// room for strace's overhead on a loaded machine. Before the fix this
	// took 11.9 s.
	if took > 300*time.Millisecond+2*400*time.Millisecond+5*time.Second {
		t.Errorf("exit took %v, want within the 300ms grace plus the commit in progress", took)
	}
	if d.err != nil {
		t.Errorf("exit status %v, want 0:\n%s", d.err, d.stderr())
	}
}
