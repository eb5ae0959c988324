package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/daemon/server/strictcodec"
)

// requestSink is a service that keeps the last request it was called
// with, as the server's codec decoded it.
type requestSink struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	mu  sync.Mutex
	got proto.Message
}

func (s *requestSink) keep(req proto.Message) {
	s.mu.Lock()
	s.got = proto.Clone(req)
	s.mu.Unlock()
}

func (s *requestSink) take() proto.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

// sinkFace is the whole HTTP face in front of a sink, which decodes as
// paymentsd's server does (strictcodec), every caller a dev principal.
func sinkFace(f *testing.F) (*requestSink, http.Handler) {
	sink := &requestSink{}
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)),
		grpc.ForceServerCodecV2(strictcodec.New("payments.v1.PaymentIntentService")),
		grpc.ChainUnaryInterceptor(strictcodec.Reject))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, sink)
	conn := httpapi.Dial(srv)
	f.Cleanup(func() { srv.Stop(); conn.Close() })
	return sink, httpapi.New(conn, auth.NewAuthenticator(auth.FromBearer, auth.Dev()))
}

func (s *requestSink) CreatePaymentIntent(_ context.Context, req *paymentsv1.CreatePaymentIntentRequest) (*paymentsv1.CreatePaymentIntentResponse, error) {
	s.keep(req)
	return &paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: "pi_1"}}, nil
}

func (s *requestSink) CancelPaymentIntent(_ context.Context, req *paymentsv1.CancelPaymentIntentRequest) (*paymentsv1.CancelPaymentIntentResponse, error) {
	s.keep(req)
	return &paymentsv1.CancelPaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: req.Id}}, nil
}

// FuzzJSONBody_FacesAgree sends request bodies through the whole HTTP face
// to a gRPC server in memory that decodes as paymentsd's does (strictcodec).
// A body whose Content-Type the face does not read as JSON is refused with
// 415, and one it does is never: application/json, in UTF-8, in any
// spelling RFC 9110 allows. A body is refused with 400 and a problem, or
// reaches the server as
// exactly the message protojson reads from it: what the face took the
// bytes to mean is what the service gets. A cancel reaches the server for
// its path's intent only, and a body that names another one is refused:
// the face's own reading of the id, which decides that, must never let
// through a body the gateway reads as naming a different intent.
func FuzzJSONBody_FacesAgree(f *testing.F) {
	for _, seed := range jsonBodySeeds {
		f.Add([]byte(seed), false, "application/json")
		f.Add([]byte(seed), true, "application/json")
	}
	for _, ct := range jsonBodyTypes {
		f.Add([]byte(`{"chain":"a"}`), false, ct)
	}
	sink, h := sinkFace(f)
	f.Fuzz(func(t *testing.T, body []byte, cancel bool, ct string) {
		// The type as a server reads it off the wire: net/http refuses a
		// value with control characters before any handler runs, and
		// trims the spaces and tabs around it.
		if !httpguts.ValidHeaderFieldValue(ct) {
			return
		}
		ct = strings.Trim(ct, " \t")
		trip := sendBody(h, sink, body, cancel, ct)
		if trip.refusedAsNotJSON(t) {
			return
		}
		trip.refusedWithAProblem(t)
		trip.meansWhatProtojsonReads(t)
	})
}

// jsonBodySeeds are FuzzJSONBody_FacesAgree's bodies, each sent as a
// create and as a cancel: a whole create, names repeated or cased
// otherwise, bodies that are not an object, bad UTF-8, ids that agree with
// the path and ids that do not, numbers protojson refuses.
var jsonBodySeeds = []string{
	`{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}`,
	`{"chain":"a","expiresInSeconds":"60"}`, `{"amount":100}`, `{"chain":"a","chain":"b"}`, `{"chain":"a","Chain":"b"}`,
	`{"expires_in_seconds":900,"expiresInSeconds":900}`, `{}`, ``, `[]`, `null`, `{"chain":"a"} {}`, `{"chain":"\ud800"}`,
	`{"chain":"caf` + "\xc3\xa9" + `"}`, `{"chain":"` + "\xff" + `"}`, `{"id":"pi_1"}`, `{"id":"pi_2"}`, `{"ID":"pi_2"}`,
	`{"id":"pi_2","id":null}`, `{"id":null,"id":"pi_2"}`, `{"id":"pi_\u0031"}`, `{"id":"pi_1","Id":"pi_2"}`, `{"unknown":1}`,
	`{"expires_in_seconds":1e3}`, `{"expires_in_seconds":-1}`, `{"chain":{"a":1}}`,
}

// jsonBodyTypes are FuzzJSONBody_FacesAgree's Content-Types, each sent
// with one small create: JSON's spellings and near misses of them.
var jsonBodyTypes = []string{"", "text/plain", "application/json; charset=latin1", `Application/JSON; Charset="utf-8"`,
	"application/jsonx", "application/json, text/plain", "application/json;", "application/*", "application/json; charset=utf-8; charset=utf-8",
	"app lication/json", "application/j\u017fon", "application/json; char\u017fet=utf-8", `application/json; charset=" utf-8"`, "application/json\t;\tcharset=UTF-8"}

// bodyTrip is one body sent through the face: what was sent, what
// protojson reads it as, what the face answered and what the server got.
type bodyTrip struct {
	body    []byte
	cancel  bool
	ct      string
	path    string
	want    proto.Message // the body as protojson reads it
	decodes bool          // whether protojson reads it
	w       *httptest.ResponseRecorder
	got     proto.Message // what the server was called with, or nil
}

// sendBody posts body of type ct, as a create or a cancel of pi_1, to h.
func sendBody(h http.Handler, sink *requestSink, body []byte, cancel bool, ct string) *bodyTrip {
	c := &bodyTrip{body: body, cancel: cancel, ct: ct}
	c.path, c.want = "/v1/payment_intents", proto.Message(&paymentsv1.CreatePaymentIntentRequest{})
	if cancel {
		c.path, c.want = "/v1/payment_intents/pi_1/cancel", &paymentsv1.CancelPaymentIntentRequest{}
	}
	// What the body means, as protojson reads it with the face's
	// options; an empty body is an empty request.
	c.decodes = len(body) == 0 || protojson.Unmarshal(body, c.want) == nil
	req := httptest.NewRequest("POST", c.path, strings.NewReader(string(body)))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Authorization", "Bearer fuzz")
	c.w = httptest.NewRecorder()
	h.ServeHTTP(c.w, req)
	c.got = sink.take()
	return c
}

// refusedAsNotJSON checks that a 415 came for a type that is not JSON
// only, as a problem, the server not called; and that a body of a type
// that is not JSON was not read. It reports whether the face answered 415.
func (c *bodyTrip) refusedAsNotJSON(t *testing.T) bool {
	t.Helper()
	body, ct, w, got := c.body, c.ct, c.w, c.got
	if w.Code == http.StatusUnsupportedMediaType {
		var p struct{ Error string }
		switch {
		case len(body) == 0 || jsonType(ct):
			t.Fatalf("body %q of type %q refused as not JSON: %s", body, ct, w.Body)
		case json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Error != "unsupported_media_type" || got != nil:
			t.Fatalf("body %q of type %q: %s, and the server called with %v", body, ct, w.Body, got)
		}
		return true
	}
	if len(body) > 0 && ct != "" && !strings.Contains(asciiLower(ct), "application/json") {
		t.Fatalf("body %q of type %q read as JSON: %d %s", body, ct, w.Code, w.Body)
	}
	return false
}

// refusedWithAProblem checks that a refusal is a 400 with a problem, and
// that the server was not called.
func (c *bodyTrip) refusedWithAProblem(t *testing.T) {
	t.Helper()
	body, path, w, got := c.body, c.path, c.w, c.got
	if w.Code >= 300 {
		var p struct{ Error, Detail string }
		if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Error == "" || p.Detail == "" {
			t.Fatalf("body %q to %s: %d %s; want 400 with a problem", body, path, w.Code, w.Body)
		}
		if got != nil {
			t.Fatalf("body %q to %s: refused (%s), but the server was called with %v", body, path, w.Body, got)
		}
	}
}

// meansWhatProtojsonReads checks that a body is taken if and only if
// protojson reads it, and reaches the server as protojson reads it; a
// cancel for the path's intent only.
func (c *bodyTrip) meansWhatProtojsonReads(t *testing.T) {
	t.Helper()
	body, path, w, got, want, decodes := c.body, c.path, c.w, c.got, c.want, c.decodes
	if c.cancel {
		// The path's id is the one canceled; a body may repeat it.
		switch named := want.(*paymentsv1.CancelPaymentIntentRequest).GetId(); {
		case decodes && named != "" && named != "pi_1":
			if w.Code < 300 {
				t.Fatalf("body %q names intent %q, and the face canceled pi_1 without a word", body, named)
			}
			return
		case decodes:
			want = &paymentsv1.CancelPaymentIntentRequest{Id: "pi_1"}
		}
	}
	switch {
	case !decodes && w.Code < 300:
		t.Fatalf("body %q to %s, which protojson refuses, was taken (%d): the server got %v", body, path, w.Code, got)
	case decodes && w.Code >= 300:
		t.Fatalf("body %q to %s, which protojson reads as %v, was refused: %s", body, path, want, w.Body)
	case decodes && !proto.Equal(got, want):
		t.Fatalf("body %q to %s reached the server as %v; protojson reads it as %v", body, path, got, want)
	}
}

// jsonType reports whether ct is application/json in UTF-8, in any of the
// spellings RFC 9110 allows: letters of either case (ASCII's alone), spaces
// and tabs around the parameter's semicolon, the charset quoted.
func jsonType(ct string) bool {
	parts := strings.Split(ct, ";")
	for i, p := range parts {
		parts[i] = asciiLower(strings.Trim(p, " \t"))
	}
	switch strings.Join(parts, ";") {
	case "", "application/json", "application/json;charset=utf-8", `application/json;charset="utf-8"`:
		return true
	}
	return false
}

// asciiLower is s with its ASCII capitals in lower case, and nothing else
// changed: HTTP's tokens are case-insensitive in ASCII only.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}
