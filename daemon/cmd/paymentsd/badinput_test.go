package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// rawCall sends one unary gRPC request over plain HTTP/2 with headers that
// grpc-go's client refuses to send (tabs, UTF-8), as other clients may.
func rawCall(t *testing.T, addr, method string, msg proto.Message, headers ...string) (codes.Code, string) {
	t.Helper()
	body, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	return rawBytesCall(t, addr, method, body, headers...)
}

// rawBytesCall is rawCall with a request body of any bytes.
func rawBytesCall(t *testing.T, addr, method string, body []byte, headers ...string) (codes.Code, string) {
	t.Helper()
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	req, err := http.NewRequest("POST", "http://"+addr+method, bytes.NewReader(append(frame, body...)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	for i := 0; i < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	var h2c http.Protocols // HTTP/2 without TLS, as gRPC's plaintext
	h2c.SetUnencryptedHTTP2(true)
	transport := &http.Transport{Protocols: &h2c}
	defer transport.CloseIdleConnections()
	resp, err := transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	get := func(k string) string {
		if v := resp.Trailer.Get(k); v != "" {
			return v
		}
		return resp.Header.Get(k)
	}
	code, err := strconv.Atoi(get("grpc-status"))
	if err != nil {
		t.Fatalf("no grpc-status in %v %v", resp.Header, resp.Trailer)
	}
	return codes.Code(code), get("grpc-message")
}

// TestE2E_BadInput sends every kind of bad input to every RPC of the real
// binary. Each gets a clear error with the right code; errors of the
// idempotency layer store nothing, so their key still runs fresh after.
func TestE2E_BadInput(t *testing.T) {
	d := start(t, spec{http: true})
	b := badInput{d: d, token: "bad-input-token"}
	created := d.createSeed(b.token, "setup", "1")
	if created.err != nil {
		t.Fatal(created.err)
	}
	b.id = intentID(created)
	for _, tc := range append(b.layerCases(), b.fieldCases(t)...) {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
	b.rawKeys(t)
	b.undecodable(t)
	badHTTPInput(t, d.httpBase, b.token, badInputKey, b.id)
	b.nothingClaimed(t)
	b.validEdges(t)
}

// badInputKey is the key every layer error of TestE2E_BadInput uses; none
// may claim it.
const badInputKey = "reusable-key"

// badInput is TestE2E_BadInput's daemon, the token of its principal, and
// the id of the intent made before the bad input.
type badInput struct {
	d         *daemon
	token, id string
}

// rpc is one call of a badCase.
type rpc func(ctx context.Context) error

// badCase is a call and the error it must get.
type badCase struct {
	name   string
	call   rpc
	ctx    context.Context
	code   codes.Code
	reason string // ErrorInfo reason, or BadRequest field for INVALID_ARGUMENT from the server
}

// check makes the call and checks its error.
func (tc badCase) check(t *testing.T) {
	t.Helper()
	err := tc.call(tc.ctx)
	st := status.Convert(err)
	if st.Code() != tc.code {
		t.Fatalf("code %v (%q), want %v", st.Code(), st.Message(), tc.code)
	}
	if st.Message() == "" {
		t.Errorf("no message")
	}
	if tc.reason == "" {
		return
	}
	if got := reason(err); got == tc.reason {
		return
	}
	if got := badRequestFields(err); len(got) != 1 || got[0] != tc.reason {
		t.Errorf("ErrorInfo %q / BadRequest fields %v, want %s", reason(err), got, tc.reason)
	}
}

func md(kv ...string) context.Context {
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

// withKey is md with b's token and kv.
func (b badInput) withKey(kv ...string) context.Context {
	return md(append([]string{"authorization", "Bearer " + b.token}, kv...)...)
}

func (b badInput) create(req *paymentsv1.CreatePaymentIntentRequest) rpc {
	return func(ctx context.Context) error { _, err := b.d.client.CreatePaymentIntent(ctx, req); return err }
}

func (b badInput) get(req *paymentsv1.GetPaymentIntentRequest) rpc {
	return func(ctx context.Context) error { _, err := b.d.client.GetPaymentIntent(ctx, req); return err }
}

func (b badInput) cancel(req *paymentsv1.CancelPaymentIntentRequest) rpc {
	return func(ctx context.Context) error { _, err := b.d.client.CancelPaymentIntent(ctx, req); return err }
}

func (b badInput) list(req *paymentsv1.ListPaymentIntentsRequest) rpc {
	return func(ctx context.Context) error { _, err := b.d.client.ListPaymentIntents(ctx, req); return err }
}

// withUnknown is m with an unknown field, number 99, appended.
func withUnknown[M proto.Message](m M) M {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	raw, _ := proto.Marshal(m)
	proto.Unmarshal(append(raw, unknown...), m)
	return m
}

// layerCases are the errors of the authentication and idempotency layers
// and of the transport: each uses badInputKey.
func (b badInput) layerCases() []badCase {
	rpcs := map[string]rpc{
		"Create": b.create(seedRequest("5")),
		"Get":    b.get(&paymentsv1.GetPaymentIntentRequest{Id: b.id}),
		"Cancel": b.cancel(&paymentsv1.CancelPaymentIntentRequest{Id: b.id}),
		"List":   b.list(&paymentsv1.ListPaymentIntentsRequest{}),
	}
	const key = badInputKey
	var cases []badCase
	for name, call := range rpcs {
		for what, ctx := range map[string]context.Context{
			"no authorization":   md(wire.KeyHeader, key),
			"not Bearer":         md("authorization", "Basic "+b.token, wire.KeyHeader, key),
			"empty token":        md("authorization", "Bearer", wire.KeyHeader, key),
			"two authorizations": md("authorization", "Bearer a", "authorization", "Bearer b", wire.KeyHeader, key),
		} {
			cases = append(cases, badCase{name + "/" + what, call, ctx, codes.Unauthenticated, ""})
		}
	}
	for _, name := range []string{"Create", "Cancel"} {
		for what, ctx := range map[string]context.Context{
			"key twice":    b.withKey(wire.KeyHeader, key, wire.KeyHeader, key+"2"),
			"key as -bin":  b.withKey(wire.KeyHeader+"-bin", key),
			"empty key":    b.withKey(wire.KeyHeader, ""),
			"256-byte key": b.withKey(wire.KeyHeader, strings.Repeat("k", 256)),
		} {
			cases = append(cases, badCase{name + "/" + what, rpcs[name], ctx, codes.InvalidArgument, wire.ReasonKeyInvalid})
		}
	}
	cases = append(cases, badCase{"Create/no key", rpcs["Create"], b.withKey(), codes.InvalidArgument, wire.ReasonKeyMissing})
	huge := seedRequest("5")
	huge.Chain = strings.Repeat("9", 5<<20)
	return append(cases, badCase{"Create/over the message size limit", b.create(huge), b.withKey(wire.KeyHeader, key), codes.ResourceExhausted, ""})
}

// fieldCases are invalid fields: errors of the handler, stored for their
// key like any result (the idempotency contract, docs/idempotency.md), so
// each uses a key of its own.
func (b badInput) fieldCases(t *testing.T) []badCase {
	var cases []badCase
	fieldCase := func(name, field string, call rpc) {
		cases = append(cases, badCase{name, call, b.withKey(wire.KeyHeader, "field-"+name), codes.InvalidArgument, field})
	}
	for field, edit := range map[string]func(*paymentsv1.CreatePaymentIntentRequest){
		"chain":              func(r *paymentsv1.CreatePaymentIntentRequest) { r.Chain = "evm:abc" },
		"token":              func(r *paymentsv1.CreatePaymentIntentRequest) { r.Token = "0x12" },
		"payer":              func(r *paymentsv1.CreatePaymentIntentRequest) { r.Payer = "" },
		"merchant":           func(r *paymentsv1.CreatePaymentIntentRequest) { r.Merchant = "0x" + strings.Repeat("z", 40) },
		"amount":             func(r *paymentsv1.CreatePaymentIntentRequest) { r.Amount = "0" },
		"expires_in_seconds": func(r *paymentsv1.CreatePaymentIntentRequest) { r.ExpiresInSeconds = 10 },
	} {
		req := seedRequest("5")
		edit(req)
		fieldCase("Create/bad "+field, field, b.create(req))
	}
	fieldCase("Create/unknown field", "#99", b.create(withUnknown(seedRequest("5"))))
	fieldCase("Get/bad id", "id", b.get(&paymentsv1.GetPaymentIntentRequest{Id: "pi_XYZ"}))
	fieldCase("Get/unknown field", "#99", b.get(withUnknown(&paymentsv1.GetPaymentIntentRequest{Id: b.id})))
	fieldCase("Cancel/bad id", "id", b.cancel(&paymentsv1.CancelPaymentIntentRequest{Id: ""}))
	fieldCase("Cancel/unknown field", "#99", b.cancel(withUnknown(&paymentsv1.CancelPaymentIntentRequest{Id: b.id})))
	fieldCase("List/negative page_size", "page_size", b.list(&paymentsv1.ListPaymentIntentsRequest{PageSize: -1}))
	fieldCase("List/forged page_token", "page_token", b.list(&paymentsv1.ListPaymentIntentsRequest{PageToken: "AXh4eHh4eHh4eA"}))
	fieldCase("List/garbage page_token", "page_token", b.list(&paymentsv1.ListPaymentIntentsRequest{PageToken: "%%%"}))
	fieldCase("List/unknown field", "#99", b.list(withUnknown(&paymentsv1.ListPaymentIntentsRequest{})))
	fieldCase("List/foreign page_token", "page_token", b.list(&paymentsv1.ListPaymentIntentsRequest{PageToken: b.foreignPageToken(t)}))
	return cases
}

// foreignPageToken is the token of another principal's second page.
func (b badInput) foreignPageToken(t *testing.T) string {
	t.Helper()
	if _, err := b.d.client.ListPaymentIntents(withCreds("other-token", ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1}); err != nil {
		t.Fatal(err)
	}
	b.d.createSeed("other-token", "o1", "1")
	b.d.createSeed("other-token", "o2", "2")
	otherPage, err := b.d.client.ListPaymentIntents(withCreds("other-token", ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if err != nil || otherPage.NextPageToken == "" {
		t.Fatalf("other principal's first page: %v, %v", otherPage, err)
	}
	return otherPage.NextPageToken
}

// rawKeys sends keys that grpc-go will not send, from a plain HTTP/2
// client.
func (b badInput) rawKeys(t *testing.T) {
	t.Helper()
	for what, k := range map[string]string{"tab": "order\t1", "UTF-8": "café-1"} {
		for _, method := range []string{paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName} {
			var msg proto.Message = seedRequest("5")
			if strings.HasSuffix(method, "Cancel"+"PaymentIntent") {
				msg = &paymentsv1.CancelPaymentIntentRequest{Id: b.id}
			}
			code, text := rawCall(t, b.d.addr, method, msg, "authorization", "Bearer "+b.token, wire.KeyHeader, k)
			if code != codes.InvalidArgument || !strings.Contains(text, "idempotency-key") {
				t.Errorf("%s key %s: %v %q, want INVALID_ARGUMENT naming the idempotency-key", method, what, code, text)
			}
		}
	}
}

// undecodable sends requests that do not decode: the caller's fault, and
// they use up no key.
func (b badInput) undecodable(t *testing.T) {
	t.Helper()
	for what, body := range map[string][]byte{
		"invalid UTF-8 in a string": protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "evm:\xff"),
		"not a message":             {0xff, 0xff, 0xff, 0xff},
		"truncated field":           {0x0a, 0x10, 'e', 'v'},
	} {
		code, text := rawBytesCall(t, b.d.addr, paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, body,
			"authorization", "Bearer "+b.token, wire.KeyHeader, badInputKey)
		if code != codes.InvalidArgument || !strings.Contains(text, "CreatePaymentIntentRequest") {
			t.Errorf("request body %s: %v %q, want INVALID_ARGUMENT naming the request type", what, code, text)
		}
	}
}

// nothingClaimed checks that nothing of the bad input created an intent
// or claimed the reusable key.
func (b badInput) nothingClaimed(t *testing.T) {
	t.Helper()
	if got := b.d.list(t, b.token); len(got) != 1 || got[0].Id != b.id || got[0].State != paymentsv1.State_STATE_CREATED {
		t.Errorf("after the bad input: %v, want only the setup intent, still created", got)
	}
	fresh := b.d.createSeed(b.token, badInputKey, "77")
	if fresh.err != nil || fresh.replayed() {
		t.Errorf("the reusable key after every rejection: %v (replayed %t), want a fresh run", fresh.err, fresh.replayed())
	}
}

// validEdges: 255 printable characters, page_size 0 and huge are valid; a
// real page token with one character appended is another token.
func (b badInput) validEdges(t *testing.T) {
	t.Helper()
	if a := b.d.createSeed(b.token, strings.Repeat("k", 255), "78"); a.err != nil {
		t.Errorf("255-character key: %v", a.err)
	}
	for _, size := range []int32{0, 1 << 30} {
		if _, err := b.d.client.ListPaymentIntents(withCreds(b.token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: size}); err != nil {
			t.Errorf("page_size %d: %v", size, err)
		}
	}
	page, err := b.d.client.ListPaymentIntents(withCreds(b.token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("first page: %v, token %q", err, page.GetNextPageToken())
	}
	for _, tok := range []string{page.NextPageToken + "A", page.NextPageToken + "_", page.NextPageToken[1:]} {
		_, err := b.d.client.ListPaymentIntents(withCreds(b.token, ""), &paymentsv1.ListPaymentIntentsRequest{PageToken: tok})
		if got := badRequestFields(err); status.Code(err) != codes.InvalidArgument || len(got) != 1 || got[0] != "page_token" {
			t.Errorf("page token %q: %v, want INVALID_ARGUMENT on page_token", tok, err)
		}
	}
}

func badRequestFields(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

// badHTTPInput is TestE2E_BadInput's table over HTTP/JSON: the same
// rejections, as the statuses and error codes of the HTTP face. Errors of
// the idempotency layer and of the HTTP face use key and claim nothing.
func badHTTPInput(t *testing.T, base, token, key, id string) {
	b := badHTTP{token: token, key: key, id: id}
	for _, tc := range append(b.layerCases(), b.otherCases()...) {
		t.Run("HTTP/"+tc.name, func(t *testing.T) { tc.check(t, base) })
	}
}

// badHTTP is badHTTPInput's token, reusable key and setup intent.
type badHTTP struct{ token, key, id string }

// route is an HTTP request's method, path and body.
type route struct{ method, path, body string }

// badHTTPCase is a request and the problem it must get.
type badHTTPCase struct {
	name    string
	route   route
	headers []string
	status  int
	code    string // the problem's error
	field   string // the one field violation named, if any
}

func (tc badHTTPCase) check(t *testing.T, base string) {
	t.Helper()
	a := httpCall(t, tc.route.method, base+tc.route.path, tc.route.body, tc.headers...)
	p := a.problem(t)
	if a.status != tc.status || p.Status != tc.status || p.Error != tc.code {
		t.Fatalf("%d %s, want %d %s", a.status, a.body, tc.status, tc.code)
	}
	if p.Detail == "" || p.Title == "" || p.Type == "" {
		t.Errorf("problem %s: want type, title and detail", a.body)
	}
	if tc.field != "" && (len(p.FieldViolations) != 1 || p.FieldViolations[0].Field != tc.field) {
		t.Errorf("field violations %+v, want one naming %s", p.FieldViolations, tc.field)
	}
	if tc.status == http.StatusUnauthorized && a.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
}

func (b badHTTP) routes() map[string]route {
	return map[string]route{
		"Create": {"POST", "/v1/payment_intents", `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"5"}`},
		"Get":    {"GET", "/v1/payment_intents/" + b.id, ""},
		"Cancel": {"POST", "/v1/payment_intents/" + b.id + "/cancel", ""},
		"List":   {"GET", "/v1/payment_intents", ""},
	}
}

func (b badHTTP) authz() []string { return []string{"Authorization", "Bearer " + b.token} }

func (b badHTTP) withKey(kv ...string) []string { return append(b.authz(), kv...) }

// withBody is the create's route with body.
func (b badHTTP) withBody(body string) route {
	create := b.routes()["Create"]
	return route{create.method, create.path, body}
}

// layerCases are the refusals of authentication and of the key, on every
// route that reads them.
func (b badHTTP) layerCases() []badHTTPCase {
	key := b.key
	var cases []badHTTPCase
	for name, r := range b.routes() {
		for what, h := range map[string][]string{
			"no authorization":   {"Idempotency-Key", key},
			"not Bearer":         {"Authorization", "Basic " + b.token, "Idempotency-Key", key},
			"empty token":        {"Authorization", "Bearer", "Idempotency-Key", key},
			"two authorizations": {"Authorization", "Bearer a", "Authorization", "Bearer b", "Idempotency-Key", key},
			"UTF-8 token":        {"Authorization", "Bearer café", "Idempotency-Key", key},
		} {
			cases = append(cases, badHTTPCase{name + "/" + what, r, h, http.StatusUnauthorized, "unauthenticated", ""})
		}
	}
	for _, name := range []string{"Create", "Cancel"} {
		for what, h := range map[string][]string{
			"key twice":               b.withKey("Idempotency-Key", key, "Idempotency-Key", key+"2"),
			"empty quoted key":        b.withKey("Idempotency-Key", `""`),
			"256-byte key":            b.withKey("Idempotency-Key", strings.Repeat("k", 256)),
			"tab in key":              b.withKey("Idempotency-Key", "order\t1"),
			"UTF-8 key":               b.withKey("Idempotency-Key", "café-1"),
			"unterminated quoted key": b.withKey("Idempotency-Key", `"`+key),
			"bad escape in key":       b.withKey("Idempotency-Key", `"a\x"`),
			"key with parameters":     b.withKey("Idempotency-Key", `"`+key+`";x=1`),
			"two keys merged":         b.withKey("Idempotency-Key", key+", "+key+"2"),
			"two quoted keys merged":  b.withKey("Idempotency-Key", `"`+key+`", "`+key+`2"`),
			"comma in a quoted key":   b.withKey("Idempotency-Key", `"`+key+`,2"`),
		} {
			cases = append(cases, badHTTPCase{name + "/" + what, b.routes()[name], h, http.StatusBadRequest, "idempotency_key_invalid", ""})
		}
	}
	return cases
}

// otherCases are the HTTP face's own refusals, then invalid fields: errors
// of the handler, stored for their key like any result, so each uses a
// key of its own.
func (b badHTTP) otherCases() []badHTTPCase {
	create, id, authz, withKey := b.routes()["Create"], b.id, b.authz(), b.withKey
	k := []string{"Idempotency-Key", b.key}
	cases := []badHTTPCase{
		{"Create/no key", create, authz, http.StatusBadRequest, "idempotency_key_missing", ""},
		{"Create/over 1 MiB", b.withBody(`{"chain":"` + strings.Repeat("9", 1<<20) + `"}`), withKey(k...), http.StatusRequestEntityTooLarge, "request_too_large", ""},
		{"Create/form content type", create, withKey(append(k, "Content-Type", "application/x-www-form-urlencoded")...), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		{"Create/two content types", create, withKey(append(k, "Content-Type", "application/json", "Content-Type", "text/plain")...), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		{"Create/text content type", create, withKey(append(k, "Content-Type", "text/plain")...), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		{"Create/not JSON", b.withBody("amount=5"), withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"Create/unknown JSON field", b.withBody(`{"amount":"5","tip":"1"}`), withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"Create/two JSON values", b.withBody(`{"amount":"5"}{"amount":"6"}`), withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"Create/invalid UTF-8 in a string", b.withBody("{\"chain\":\"evm:\xff\"}"), withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"Create/amount as a number", b.withBody(`{"amount":5}`), withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"Cancel/unknown JSON field", route{"POST", "/v1/payment_intents/" + id + "/cancel", `{"reason":"x"}`}, withKey(k...), http.StatusBadRequest, "invalid_argument", ""},
		{"List/page_size not a number", route{"GET", "/v1/payment_intents?page_size=ten", ""}, authz, http.StatusBadRequest, "invalid_argument", ""},
		{"Get/unknown intent", route{"GET", "/v1/payment_intents/pi_000000000000000000000000", ""}, authz, http.StatusNotFound, "not_found", ""},
		{"no such route", route{"GET", "/v1/payment_intent", ""}, authz, http.StatusNotFound, "route_not_found", ""},
		{"Get/wrong method", route{"PUT", "/v1/payment_intents/" + id, ""}, authz, http.StatusMethodNotAllowed, "method_not_allowed", ""},
	}
	seed := create.body
	for field, body := range map[string]string{
		"chain":              strings.Replace(seed, "evm:31337", "evm:abc", 1),
		"token":              strings.Replace(seed, "0x5FbDB2315678afecb367f032d93F642f64180aa3", "0x12", 1),
		"amount":             strings.Replace(seed, `"5"`, `"0"`, 1),
		"expires_in_seconds": strings.Replace(seed, `"amount"`, `"expires_in_seconds":10,"amount"`, 1),
	} {
		cases = append(cases, badHTTPCase{"Create/bad " + field, b.withBody(body), withKey("Idempotency-Key", "http-field-"+field), http.StatusBadRequest, "invalid_argument", field})
	}
	return append(cases,
		badHTTPCase{"Get/bad id", route{"GET", "/v1/payment_intents/pi_XYZ", ""}, authz, http.StatusBadRequest, "invalid_argument", "id"},
		badHTTPCase{"List/negative page_size", route{"GET", "/v1/payment_intents?page_size=-1", ""}, authz, http.StatusBadRequest, "invalid_argument", "page_size"},
		badHTTPCase{"List/garbage page_token", route{"GET", "/v1/payment_intents?page_token=%25%25%25", ""}, authz, http.StatusBadRequest, "invalid_argument", "page_token"},
	)
}
