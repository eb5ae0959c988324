package main

// Tests of the limits on what a client without a credential can hold: the
// real binary attacked over loopback, in a memory cgroup or under an
// open-file limit, with a valid call made during the attack.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// createDuringAttack makes one valid create on a connection of its own and
// fails the test unless it succeeds within 10 s. It retries a refusal
// that says nothing ran, with the same key, as a careful client does.
func createDuringAttack(t *testing.T, d *daemon, key string) {
	t.Helper()
	conn := d.newConn(t, nil)
	defer conn.Close()
	began := time.Now()
	tries, err := createRetrying(paymentsv1.NewPaymentIntentServiceClient(conn), "merchant-limits", key)
	if err != nil {
		t.Fatalf("a valid create during the attack: %v (after %v, %d tries)", err, time.Since(began), tries)
	}
	t.Logf("a valid create during the attack answered in %v, at try %d", time.Since(began).Round(time.Millisecond), tries)
}

// memoryCgroup puts pid in a new memory cgroup limited to limit bytes
// (cgroup v1's memory controller, else v2's) and removes it at the end.
func memoryCgroup(t *testing.T, pid int, limit int64) {
	t.Helper()
	name := fmt.Sprintf("paymentsd-test-%d-%d", os.Getpid(), pid)
	dir, limitFile := filepath.Join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		dir, limitFile = filepath.Join("/sys/fs/cgroup", name), "memory.max" // cgroup v2
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make a memory cgroup (the limits tests need root and a cgroup memory controller): %v", err)
	}
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ { // the process is gone only once killed
			time.Sleep(50 * time.Millisecond)
		}
	})
	for file, value := range map[string]string{limitFile: strconv.FormatInt(limit, 10), "cgroup.procs": strconv.Itoa(pid)} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			t.Fatalf("cgroup %s: %v", file, err)
		}
	}
}

// peakRSS is the most resident memory pid has had (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}

// attacker is one raw HTTP/2 connection that reads and drops whatever the
// server sends, until the server closes it.
type attacker struct {
	conn   net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	buf    bytes.Buffer
	closed chan struct{} // closed when the server has closed the connection
}

func dialAttacker(addr string) (*attacker, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	a := &attacker{conn: c, fr: http2.NewFramer(c, c), closed: make(chan struct{})}
	a.enc = hpack.NewEncoder(&a.buf)
	go func() {
		io.Copy(io.Discard, c)
		close(a.closed)
	}()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return a, err
	}
	return a, a.fr.WriteSettings()
}

// block is the encoded header fields of a CreatePaymentIntent call.
func (a *attacker) block(extra ...hpack.HeaderField) []byte {
	a.buf.Reset()
	for _, f := range append([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName},
		{Name: ":authority", Value: "paymentsd"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}, extra...) {
		a.enc.WriteField(f)
	}
	return bytes.Clone(a.buf.Bytes())
}

// unfinishedBlock sends a header block of about size bytes that never
// ends: a HEADERS frame, then CONTINUATION frames without END_HEADERS.
func (a *attacker) unfinishedBlock(size int) error {
	if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.block()}); err != nil {
		return err
	}
	value := strings.Repeat("a", 8000)
	for sent := 0; sent < size; {
		a.buf.Reset()
		a.enc.WriteField(hpack.HeaderField{Name: "x-pad-" + strconv.Itoa(sent), Value: value, Sensitive: true})
		if err := a.fr.WriteContinuation(1, false, a.buf.Bytes()); err != nil {
			return err
		}
		sent += a.buf.Len()
	}
	return nil
}

// streamsWithoutData opens n streams with complete headers and no data.
func (a *attacker) streamsWithoutData(n int) error {
	for i := 0; i < n; i++ {
		if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: a.block(), EndHeaders: true}); err != nil {
			return err
		}
	}
	return nil
}

// attack runs n attackers at once, each doing do, and returns when all
// have done it or been cut off by the server.
func attack(t *testing.T, addr string, n int, do func(*attacker) error) []*attacker {
	t.Helper()
	var wg sync.WaitGroup
	attackers := make([]*attacker, n)
	for i := range attackers {
		a, err := dialAttacker(addr)
		if err != nil {
			t.Fatalf("attacker %d: %v", i, err)
		}
		attackers[i] = a
		t.Cleanup(func() { a.conn.Close() })
		wg.Go(func() { do(a) }) // an error is the server cutting it off
	}
	wg.Wait()
	return attackers
}

// attackInMemoryCgroup starts paymentsd in a 512 MiB memory cgroup and
// attacks it with n attackers doing do, making a valid create from
// another client during the attack and after it. It fails the test
// unless paymentsd lives and its peak RSS stays under 256 MiB.
func attackInMemoryCgroup(t *testing.T, what string, n int, do func(*attacker) error) *daemon {
	t.Helper()
	d := start(t, spec{metrics: true})
	pid := d.cmd.Process.Pid
	memoryCgroup(t, pid, 512<<20)

	done := make(chan struct{})
	go func() {
		defer close(done)
		attack(t, d.addr, n, do)
	}()
	time.Sleep(200 * time.Millisecond) // the attack under way
	createDuringAttack(t, d, "during-attack")
	<-done
	d.wantRunning(t, "under the attack")
	createDuringAttack(t, d, "after-attack")
	peak := peakRSS(t, pid)
	t.Logf("%s: peak RSS %.1f MiB", what, float64(peak)/(1<<20))
	if peak > 256<<20 {
		t.Errorf("peak RSS %d MiB, want under 256 MiB", peak>>20)
	}
	return d
}

func TestLimits_UnfinishedHeaderBlocks_MemoryBoundedAndCallsServed(t *testing.T) {
	attackInMemoryCgroup(t, "40 connections x 14 MB of unfinished header blocks", 40,
		func(a *attacker) error { return a.unfinishedBlock(14_000_000) })
}

// The attackers' streams stay open, waiting for data, and hold every call
// slot: a create finds room in the slot of the oldest.
func TestLimits_StreamsWithoutData_MemoryBoundedAndCallsServed(t *testing.T) {
	d := attackInMemoryCgroup(t, "8 connections x 25,000 streams without data", 8,
		func(a *attacker) error { return a.streamsWithoutData(25_000) })
	m := d.scrape(t)
	// Each of the two creates took the slot of an evicted call and gave it
	// back when it ended; an attacker's stream still on its way takes it
	// again, and one that came earlier does not.
	if got := m["paymentsd_grpc_calls_in_progress"]; got < 1022 || got > 1024 {
		t.Errorf("calls in progress after the attack: %v, want the limit, 1024, less the creates' slots", got)
	}
	evicted := m[`paymentsd_listener_refusals_total{listener="grpc",reason="call_evicted"}`]
	t.Logf("%v calls waiting for their request cancelled to make room", evicted)
	if evicted == 0 {
		t.Error("no waiting call cancelled to make room")
	}
}

func TestLimits_UnfinishedHeaderBlock_ClosedAfterHeaderTimeout(t *testing.T) {
	d := start(t, spec{metrics: true, args: []string{"--grpc-header-timeout", "1s"}})
	a, err := dialAttacker(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.conn.Close()
	began := time.Now()
	if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.block()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.closed:
		t.Logf("an unfinished header block's connection closed after %v", time.Since(began).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("a connection with an unfinished header block is still open after 10 s; --grpc-header-timeout is 1s")
	}
	waitFor(t, 5*time.Second, "the header timeout counted", func() bool {
		return d.scrape(t)[`paymentsd_listener_refusals_total{listener="grpc",reason="header_timeout"}`] == 1
	})
	if !strings.Contains(d.stderr(), `"reason":"header_timeout"`) {
		t.Errorf("the header timeout is not logged:\n%s", d.stderr())
	}
	createDuringAttack(t, d, "after-header-timeout")
}

// floodChildEnv asks this test binary, run again, to be a flood child:
// TestLimits_FloodChild opens the connections it names and reports on
// stdout. A process of its own holds the connections, as the test's
// process could not hold 19,990 of them under a 20,000 limit beside its
// own files.
const floodChildEnv = "PAYMENTSD_TEST_FLOOD"

// TestLimits_FloodChild is a flood child when floodChildEnv is set
// ("addr count"): it opens count connections to addr, sends each the
// HTTP/2 preface and nothing more, prints "opened N", then "closed N
// SECONDS" each time the server has closed a tenth of them more, and
// prints the total and exits once all are closed.
func TestLimits_FloodChild(t *testing.T) {
	job := os.Getenv(floodChildEnv)
	if job == "" {
		return // run as a test: nothing to do
	}
	addr, countText, _ := strings.Cut(job, " ")
	count, _ := strconv.Atoi(countText)
	var closed atomic.Int64
	began := time.Now()
	var wg sync.WaitGroup
	opened := 0
	for i := 0; i < count; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Printf("dial failed after %d: %v\n", opened, err)
			continue
		}
		opened++
		c.Write([]byte(http2.ClientPreface))
		wg.Go(func() {
			io.Copy(io.Discard, c)
			c.Close()
			if n := closed.Add(1); n%int64(max(count/10, 1)) == 0 {
				fmt.Printf("closed %d %.1f\n", n, time.Since(began).Seconds())
			}
		})
	}
	fmt.Printf("opened %d %.1f\n", opened, time.Since(began).Seconds())
	wg.Wait()
	// The total is printed after every goroutine is done: a goroutine's
	// own line may come after a later one's.
	fmt.Printf("closed %d %.1f\n", closed.Load(), time.Since(began).Seconds())
	os.Exit(0)
}

// floodChild starts a flood child of count connections to addr and
// returns its report's lines as they come.
func floodChild(t *testing.T, addr string, count int) <-chan string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLimits_FloodChild$")
	cmd.Env = append(os.Environ(), floodChildEnv+"="+addr+" "+strconv.Itoa(count))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

func TestLimits_IdleConnectionFlood_UnderFileLimit_CallsAndHealthServed(t *testing.T) {
	const idle = 3 * time.Second
	d := start(t, spec{metrics: true, args: []string{"--grpc-max-connection-idle", idle.String()}})
	pid := d.cmd.Process.Pid
	limit := unix.Rlimit{Cur: 20_000, Max: 20_000}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	metrics := d.metricsAddr(t)

	// Five children, as one goroutine a connection under -race must stay
	// below its limit of 8,128 goroutines.
	const perChild, children = 3998, 5
	reports := make([]<-chan string, children)
	for i := range reports {
		reports[i] = floodChild(t, d.addr, perChild)
	}
	openedAt := time.Now()
	for i, r := range reports {
		line := ""
		for line = range r { // the server may close some before all are open
			if !strings.HasPrefix(line, "closed ") {
				break
			}
		}
		if !strings.HasPrefix(line, fmt.Sprintf("opened %d ", perChild)) {
			t.Fatalf("flood child %d: %q, want all %d connections opened", i, line, perChild)
		}
	}
	t.Logf("%d idle connections opened", perChild*children)

	createDuringAttack(t, d, "during-idle-flood")
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + metrics + "/healthz")
	if err != nil {
		t.Fatalf("/healthz during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz during the flood: %s", resp.Status)
	}

	// Every flood connection is closed: most to make room for newer ones,
	// the rest after the idle bound.
	var last string
	for i, r := range reports {
		for line := range r {
			last = line
		}
		if !strings.HasPrefix(last, fmt.Sprintf("closed %d ", perChild)) {
			t.Fatalf("flood child %d ended with %q, want all %d closed by the server", i, last, perChild)
		}
	}
	m := scrape(t, metrics)
	evicted := m[`paymentsd_listener_refusals_total{listener="grpc",reason="idle_evicted"}`]
	t.Logf("all %d closed by %v after they were opened: %v to make room for newer ones, the other %v after the idle bound (%v)",
		perChild*children, time.Since(openedAt).Round(100*time.Millisecond), evicted, float64(perChild*children)-evicted, idle)
	if evicted == 0 {
		t.Error("no idle connection evicted")
	}
	if got := m[`paymentsd_listener_refusals_total{listener="grpc",reason="accept_error"}`]; got != 0 {
		t.Errorf("%v accept errors: the flood reached the open-file limit", got)
	}
}

// Out of file descriptors, the gRPC listener's failed accepts are counted
// and logged, once a second at most, and it serves again once some close.
func TestLimits_AcceptFailures_CountedAndLogged(t *testing.T) {
	d := start(t, spec{metrics: true})
	metrics := d.metricsAddr(t)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(len(fds) + 10), Max: 20_000}
	if err := unix.Prlimit(d.cmd.Process.Pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	var conns []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitFor(t, 10*time.Second, "an accept failure logged", func() bool {
		return strings.Contains(d.stderr(), `"msg":"accept failed: the server waits and accepts again"`)
	})
	for _, c := range conns {
		c.Close()
	}
	limit.Cur = 20_000
	if err := unix.Prlimit(d.cmd.Process.Pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	createDuringAttack(t, d, "after-accept-failures")
	got := scrape(t, metrics)[`paymentsd_listener_refusals_total{listener="grpc",reason="accept_error"}`]
	logged := strings.Count(d.stderr(), `"msg":"accept failed`)
	t.Logf("%v accept failures counted, %d logged", got, logged)
	if got == 0 || logged == 0 || float64(logged) > got {
		t.Errorf("accept failures: %v counted, %d logged", got, logged)
	}
}

// A busy HTTP connection, one whose request is still arriving, is never
// closed to make room for a new one: the idle one is.
func TestLimits_HTTPConnectionWithARequestInProgress_NotEvicted(t *testing.T) {
	d := start(t, spec{http: true, args: []string{"--max-connections", "2"}})
	addr := d.httpAddr
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	body, err := protojson.Marshal(seedRequest("100"))
	if err != nil {
		t.Fatal(err)
	}
	busy := dial()
	fmt.Fprintf(busy, "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nIdempotency-Key: busy\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	time.Sleep(200 * time.Millisecond) // the server has read the headers: the connection is active
	idle := dial()
	time.Sleep(100 * time.Millisecond)
	dial() // the third: one of the two must go
	time.Sleep(200 * time.Millisecond)

	if _, err := busy.Write(body[10:]); err != nil {
		t.Fatalf("the rest of the busy request: %v", err)
	}
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	status, err := bufio.NewReader(busy).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 201") {
		t.Fatalf("the busy connection's answer: %q, %v; want 201, not a closed connection", status, err)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); err == nil {
		t.Errorf("the idle connection read %d bytes, want it closed for the newer one", n)
	}
	t.Logf("busy answered %q; the idle one was closed", strings.TrimSpace(status))
}
