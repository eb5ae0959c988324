package main

// The same authorization bytes must be the same credential, or the same
// refusal, on both faces. Neither side goes through a client library that
// would trim or validate: HTTP is written by hand on a TCP connection, gRPC
// through testkit/rawgrpc.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/testkit/rawgrpc"
	"github.com/paymentsd/paymentsd/wire"
)

// How one face answered a create.
type credOutcome string

const (
	credAccepted credOutcome = "accepted"  // 201 / OK: an intent of t1's principal
	credReader   credOutcome = "reader"    // the authorization reader refused: 401 / UNAUTHENTICATED
	credHTTP1    credOutcome = "http1-400" // Go's HTTP/1.1 server answered 400 before any handler
	credH2       credOutcome = "h2-reset"  // grpc-go's HTTP/2 layer reset the stream (RST_STREAM PROTOCOL_ERROR)
)

// credAnswer is one face's answer to one row.
type credAnswer struct {
	outcome credOutcome
	id      string // the intent, when accepted
	message string // the refusal's message (problem detail, grpc-message), or what the layer said
}

func (a credAnswer) String() string {
	if a.outcome == credAccepted {
		return fmt.Sprintf("accepted %s", a.id)
	}
	return fmt.Sprintf("%s %q", a.outcome, a.message)
}

type credRow struct {
	name   string
	values []string // the authorization values, one header field (line) each
	http   credOutcome
	grpc   credOutcome
	// in, when set, is a part of the reader's message, which names the
	// byte it refused.
	in string
	// like, when set, names a row whose reader message this row's must be.
	like string
}

var credRows = []credRow{
	{"baseline", []string{"Bearer t1"}, credAccepted, credAccepted, "", ""},
	{"trailing space (the bug: create twice, one intent)", []string{"Bearer t1 "}, credAccepted, credAccepted, "", ""},
	{"trailing tab", []string{"Bearer t1\t"}, credAccepted, credAccepted, "", ""},
	{"leading space", []string{" Bearer t1"}, credAccepted, credAccepted, "", ""},
	{"spaces and tabs at both ends", []string{" \t Bearer t1 \t "}, credAccepted, credAccepted, "", ""},
	{"two spaces after the scheme", []string{"Bearer  t1"}, credAccepted, credAccepted, "", ""},
	{"lower-case scheme", []string{"bearer t1"}, credAccepted, credAccepted, "", ""},
	{"upper-case scheme", []string{"BEARER t1"}, credAccepted, credAccepted, "", ""},
	{"tab after the scheme", []string{"Bearer\tt1"}, credReader, credReader, "(0x09) at byte 6", ""},
	// The reader counts bytes after dropping the ends, the only count the
	// HTTP face can know.
	{"leading space, tab after the scheme", []string{" Bearer\tt1"}, credReader, credReader, "(0x09) at byte 6", ""},
	{"tab inside the token", []string{"Bearer t1\tt2"}, credReader, credReader, "(0x09) at byte 9", ""},
	{"space inside the token", []string{"Bearer t1 t2"}, credReader, credReader, "", ""},
	// Over HTTP/1.1 the CR LF and the space after it are an obs-fold, a
	// continuation line: Go's server joins it to the line before with one
	// space, so the reader sees "Bearer t1 t2" and refuses it as the row
	// above. The HTTP/2 layer refuses the CR LF itself.
	{"CR LF inside (obs-fold over HTTP/1.1)", []string{"Bearer t1\r\n t2"}, credReader, credH2, "", "space inside the token"},
	// Control bytes other than tab never reach the reader: Go's HTTP/1.1
	// server answers 400 and the HTTP/2 layer resets the stream, before
	// any handler.
	{"NUL", []string{"Bearer t1\x00"}, credHTTP1, credH2, "", ""},
	{"SOH", []string{"Bearer \x01t1"}, credHTTP1, credH2, "", ""},
	{"DEL", []string{"Bearer t1\x7f"}, credHTTP1, credH2, "", ""},
	{"byte 0x80", []string{"Bearer t1\x80"}, credReader, credReader, "(0x80) at byte 9", ""},
	{"UTF-8 é in the token", []string{"Bearer t\xc3\xa9"}, credReader, credReader, "(0xc3) at byte 8", ""},
	{"empty value", []string{""}, credReader, credReader, "", ""},
	{"no authorization header", nil, credReader, credReader, "got 0", ""},
	{"Bearer alone", []string{"Bearer"}, credReader, credReader, "", ""},
	{"Bearer and a space", []string{"Bearer "}, credReader, credReader, "", ""},
	{"Basic", []string{"Basic dDE6"}, credReader, credReader, "", ""},
	{"two authorization headers", []string{"Bearer t1", "Bearer t1"}, credReader, credReader, "send exactly one authorization header, got 2", ""},
}

func TestCredential_SameBytesSameAnswerOnBothFaces(t *testing.T) {
	t.Run("dev mode", func(t *testing.T) { testCredentialRows(t) })
	t.Run("api keys", func(t *testing.T) {
		keys := filepath.Join(t.TempDir(), "api-keys")
		lines := auth.KeyLine("merchant-t1", "t1") + "\n" + auth.KeyLine("merchant-t2", "t2") + "\n"
		if err := os.WriteFile(keys, []byte(lines), 0o600); err != nil {
			t.Fatal(err)
		}
		testCredentialRows(t, "--api-keys", keys)
	})
}

func testCredentialRows(t *testing.T, args ...string) {
	d := start(t, spec{http: true, args: args})
	httpAddr := d.httpAddr
	accepted := 0
	messages := map[string]string{} // row to its reader message
	for i, row := range credRows {
		t.Run(row.name, func(t *testing.T) {
			key := fmt.Sprintf("cred-%d", i)
			h := rawHTTPCreate(t, httpAddr, row.values, key)
			g := rawGRPCCreate(t, d.addr, row.values, key)
			t.Logf("%q: HTTP %v; gRPC %v", row.values, h, g)

			switch {
			case h.outcome == credAccepted && g.outcome == credAccepted:
				accepted++
				if h.id != g.id {
					t.Errorf("one key and body made two intents: %s over HTTP, %s over gRPC", h.id, g.id)
				}
				// Made by t1's principal: a plain "Bearer t1" finds it.
				if _, err := d.client.GetPaymentIntent(withCreds("t1", ""), &paymentsv1.GetPaymentIntentRequest{Id: h.id}); err != nil {
					t.Errorf("intent %s is not t1's: %v", h.id, err)
				}
			case h.outcome == credAccepted || g.outcome == credAccepted:
				t.Errorf("one face accepted and the other refused: HTTP %v, gRPC %v", h, g)
			case h.outcome == credReader && g.outcome == credReader && h.message != g.message:
				t.Errorf("the faces refused with different messages: HTTP %q, gRPC %q", h.message, g.message)
			}
			if h.outcome != row.http || g.outcome != row.grpc {
				t.Errorf("HTTP %s, gRPC %s; want HTTP %s, gRPC %s", h.outcome, g.outcome, row.http, row.grpc)
			}
			for _, a := range []credAnswer{h, g} {
				if a.outcome != credReader {
					continue
				}
				if !strings.Contains(a.message, row.in) {
					t.Errorf("refusal %q does not say %q", a.message, row.in)
				}
				if want, ok := messages[row.like]; row.like != "" && (!ok || a.message != want) {
					t.Errorf("refusal %q, want the one of row %q: %q", a.message, row.like, want)
				}
				messages[row.name] = a.message
			}
		})
	}
	if got := len(d.list(t, "t1")); got != accepted {
		t.Errorf("t1 has %d intents after %d accepted rows (one intent each): refused rows stored something, or accepted ones stored two", got, accepted)
	}
}

// rawHTTPCreate posts the seed body with an authorization line per value,
// written byte for byte on a TCP connection.
func rawHTTPCreate(t *testing.T, addr string, values []string, key string) credAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "POST /v1/payment_intents HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", addr, len(seedBody))
	fmt.Fprintf(&req, "Idempotency-Key: %s\r\nConnection: close\r\n", key)
	for _, v := range values {
		req.WriteString("Authorization: " + v + "\r\n")
	}
	req.WriteString("\r\n" + seedBody)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := httpAnswer{resp.StatusCode, resp.Header, body}
	switch {
	case a.status == http.StatusCreated:
		id, _ := a.intent(t)["id"].(string)
		return credAnswer{outcome: credAccepted, id: id}
	case a.status == http.StatusUnauthorized:
		p := a.problem(t)
		if p.Status != 401 || p.Error != "unauthenticated" {
			t.Errorf("401 with problem %s, want status 401, error unauthenticated", a.body)
		}
		return credAnswer{outcome: credReader, message: p.Detail}
	case a.status == http.StatusBadRequest && a.header.Get("Content-Type") != "application/problem+json":
		return credAnswer{outcome: credHTTP1, message: string(a.body)} // net/http's own plain-text 400
	}
	t.Fatalf("HTTP answered %d %s", a.status, a.body)
	return credAnswer{}
}

// rawGRPCCreate makes the same create over gRPC, each value its own
// authorization field.
func rawGRPCCreate(t *testing.T, addr string, values []string, key string) credAnswer {
	t.Helper()
	var extra []rawgrpc.Field
	for _, v := range values {
		extra = append(extra, rawgrpc.Field{Name: "authorization", Value: v})
	}
	extra = append(extra, rawgrpc.Field{Name: wire.KeyHeader, Value: key})
	msg, err := proto.Marshal(seedRequest("100000000"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := rawgrpc.Call(ctx, addr, nil, rawgrpc.Fields(addr, paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, extra...), msg)
	var se http2.StreamError
	switch {
	case errors.As(err, &se) && se.Code == http2.ErrCodeProtocol:
		return credAnswer{outcome: credH2, message: "RST_STREAM " + se.Code.String()}
	case err != nil:
		t.Fatalf("gRPC: %v", err)
	case r.Code == codes.OK:
		var resp paymentsv1.CreatePaymentIntentResponse
		if err := proto.Unmarshal(r.Body, &resp); err != nil {
			t.Fatal(err)
		}
		return credAnswer{outcome: credAccepted, id: resp.GetPaymentIntent().GetId()}
	case r.Code == codes.Unauthenticated:
		return credAnswer{outcome: credReader, message: r.Message}
	}
	t.Fatalf("gRPC answered %d %v %q", r.Status, r.Code, r.Message)
	return credAnswer{}
}
