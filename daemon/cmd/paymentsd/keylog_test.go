package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// keyLogCommand is the shell command of docs/metrics-and-logs.md that
// lists every request of a key and principal from paymentsd.log: its line
// that sets key and principal_hash, and the jq line after it.
func keyLogCommand(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/metrics-and-logs.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "key=order-100 ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "jq ") {
			return l + "\n" + lines[i+1]
		}
	}
	t.Fatal("docs/metrics-and-logs.md: no `key=order-100 ...` line followed by its jq command")
	return ""
}

// Every request of one principal with one key is found in the log by the
// documented jq command, one line each, with its code, decision, reason
// and intent, whichever face it came by: in flight while another
// replica's claim holds the key (409), the create, its replay, a reuse
// with another amount (422), and a store failure (503). No token is in
// the log.
func TestLogs_EveryRequestOfAKeyFoundByTheDocumentedCommand(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("jq is not installed (apt-get install jq): under CI=true the key log test cannot skip")
		}
		t.Skip("jq is not installed (apt-get install jq)")
	}
	c := pgtest.Require(t, pgCluster)
	url := postgresURL(t)
	d := start(t, spec{db: url, http: true, args: []string{"--in-flight-wait", "100ms"}})
	faces := keyLogFaces(t, d)
	ids := keyLogRequests(t, url, faces)
	time.Sleep(1100 * time.Millisecond) // past the second a replica answers a completed key from memory
	c.Stop(t)
	for _, f := range faces {
		f.create("100000000")
	}
	c.StartAgain(t)

	log := d.stderr()
	for _, token := range []string{faces[0].token, faces[1].token, pgtest.Password} {
		if strings.Contains(log, token) {
			t.Errorf("the log holds the secret %q", token)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "paymentsd.log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range faces {
		keyLogListed(t, dir, f, ids[f.name])
	}
}

// keyLogKey is the key of TestLogs_EveryRequestOfAKeyFoundByTheDocumentedCommand's
// requests, the documented command's.
const keyLogKey = "order-100"

// keyLogFace is a face requests of keyLogKey come by, with its principal's
// token.
type keyLogFace struct {
	name, token string
	create      func(amount string) (code, intentID string)
}

// keyLogFaces are d's gRPC and HTTP faces, each with a token of its own.
func keyLogFaces(t *testing.T, d *daemon) []keyLogFace {
	grpcFace := keyLogFace{name: "grpc", token: "key-log-grpc"}
	grpcFace.create = func(amount string) (string, string) {
		ctx, cancel := context.WithTimeout(withCreds(grpcFace.token, keyLogKey), 20*time.Second)
		defer cancel()
		a := d.create(ctx, seedRequest(amount))
		if a.err != nil {
			return status.Code(a.err).String(), ""
		}
		return "OK", a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
	}
	httpFace := keyLogFace{name: "http", token: "key-log-http"}
	httpFace.create = func(amount string) (string, string) {
		body := strings.Replace(seedBody, `"amount":"100000000"`, `"amount":"`+amount+`"`, 1)
		a := d.httpCreate(t, httpFace.token, keyLogKey, body)
		if a.status/100 != 2 {
			return strconv.Itoa(a.status), ""
		}
		id, _ := a.intent(t)["id"].(string)
		return strconv.Itoa(a.status), id
	}
	return []keyLogFace{grpcFace, httpFace}
}

// keyLogRequests sends each face's requests of keyLogKey but the store
// failure: in flight while another replica's claim (an advisory lock on
// the database at url) holds the key, the create, its replay, and a reuse
// with another amount. It returns each face's intent.
func keyLogRequests(t *testing.T, url string, faces []keyLogFace) map[string]string {
	holder := pgtest.Connect(t, url) // another replica's claim of the key, in flight
	ids := map[string]string{}
	for _, f := range faces {
		held := pgstore.KeyLock(storage.RecordKey{Scope: devPrincipal(f.token), Key: keyLogKey})
		if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, held); err != nil {
			t.Fatal(err)
		}
		if code, _ := f.create("100000000"); code != map[string]string{"grpc": "Aborted", "http": "409"}[f.name] {
			t.Errorf("%s: create while the key is held: %s; want in flight", f.name, code)
		}
		if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`); err != nil {
			t.Fatal(err)
		}
		_, ids[f.name] = f.create("100000000")
		if _, replayed := f.create("100000000"); replayed != ids[f.name] || replayed == "" {
			t.Errorf("%s: create %q, then its replay %q", f.name, ids[f.name], replayed)
		}
		f.create("200000000") // the key reused for another payment
	}
	return ids
}

// keyLogListed runs the documented command on dir's paymentsd.log for f's
// principal and checks that it lists f's five requests, id its intent.
func keyLogListed(t *testing.T, dir string, f keyLogFace, id string) {
	t.Helper()
	cmd := exec.Command("bash", "-ec", keyLogCommand(t))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "principal="+devPrincipal(f.token))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: the documented jq command: %v\n%s", f.name, err, out)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var l struct {
			Msg, Idempotency, Reason string
			Code                     any
			IntentID                 string `json:"intent_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: jq printed %q: %v", f.name, line, err)
		}
		got = append(got, strings.Join([]string{l.Msg, fmtCode(l.Code), l.Idempotency, l.Reason, l.IntentID}, " "))
	}
	want := map[string][]string{
		"grpc": {
			"rpc Aborted in_flight IDEMPOTENCY_KEY_IN_USE ",
			"rpc OK fresh  " + id,
			"rpc OK replay  " + id,
			"rpc FailedPrecondition mismatch IDEMPOTENCY_KEY_REUSED ",
			"rpc Unavailable   ",
		},
		"http": {
			"http 409 in_flight IDEMPOTENCY_KEY_IN_USE ",
			"http 201 fresh  " + id,
			"http 201 replay  " + id, // the same answer, its status too
			"http 422 mismatch IDEMPOTENCY_KEY_REUSED ",
			"http 503   ",
		},
	}[f.name]
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: the documented command lists\n%s\nwant\n%s", f.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// fmtCode is a line's code: a gRPC code's name, or an HTTP status.
func fmtCode(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.Itoa(int(f))
	}
	s, _ := v.(string)
	return s
}
