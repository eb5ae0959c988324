package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"path/filepath"
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
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--http-listen", "127.0.0.1:0")
	const token = "bad-input-token"
	created := d.create(withCreds(token, "setup"), seedRequest("1"))
	if created.err != nil {
		t.Fatal(created.err)
	}
	id := created.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id

	md := func(kv ...string) context.Context {
		return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
	}
	auth := []string{"authorization", "Bearer " + token}
	withKey := func(kv ...string) context.Context { return md(append(append([]string{}, auth...), kv...)...) }
	const key = "reusable-key" // every layer error below uses it; none may claim it
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	withUnknown := func(m proto.Message) proto.Message {
		b, _ := proto.Marshal(m)
		proto.Unmarshal(append(b, unknown...), m)
		return m
	}

	type rpc func(ctx context.Context) error
	create := func(req *paymentsv1.CreatePaymentIntentRequest) rpc {
		return func(ctx context.Context) error { _, err := d.client.CreatePaymentIntent(ctx, req); return err }
	}
	get := func(req *paymentsv1.GetPaymentIntentRequest) rpc {
		return func(ctx context.Context) error { _, err := d.client.GetPaymentIntent(ctx, req); return err }
	}
	cancel := func(req *paymentsv1.CancelPaymentIntentRequest) rpc {
		return func(ctx context.Context) error { _, err := d.client.CancelPaymentIntent(ctx, req); return err }
	}
	list := func(req *paymentsv1.ListPaymentIntentsRequest) rpc {
		return func(ctx context.Context) error { _, err := d.client.ListPaymentIntents(ctx, req); return err }
	}
	rpcs := map[string]rpc{
		"Create": create(seedRequest("5")),
		"Get":    get(&paymentsv1.GetPaymentIntentRequest{Id: id}),
		"Cancel": cancel(&paymentsv1.CancelPaymentIntentRequest{Id: id}),
		"List":   list(&paymentsv1.ListPaymentIntentsRequest{}),
	}

	type badCase struct {
		name   string
		call   rpc
		ctx    context.Context
		code   codes.Code
		reason string // ErrorInfo reason, or BadRequest field for INVALID_ARGUMENT from the server
	}
	var cases []badCase
	for name, call := range rpcs {
		for what, ctx := range map[string]context.Context{
			"no authorization":   md(wire.KeyHeader, key),
			"not Bearer":         md("authorization", "Basic "+token, wire.KeyHeader, key),
			"empty token":        md("authorization", "Bearer", wire.KeyHeader, key),
			"two authorizations": md("authorization", "Bearer a", "authorization", "Bearer b", wire.KeyHeader, key),
		} {
			cases = append(cases, badCase{name + "/" + what, call, ctx, codes.Unauthenticated, ""})
		}
	}
	for _, name := range []string{"Create", "Cancel"} {
		for what, ctx := range map[string]context.Context{
			"key twice":    withKey(wire.KeyHeader, key, wire.KeyHeader, key+"2"),
			"key as -bin":  withKey(wire.KeyHeader+"-bin", key),
			"empty key":    withKey(wire.KeyHeader, ""),
			"256-byte key": withKey(wire.KeyHeader, strings.Repeat("k", 256)),
		} {
			cases = append(cases, badCase{name + "/" + what, rpcs[name], ctx, codes.InvalidArgument, wire.ReasonKeyInvalid})
		}
	}
	cases = append(cases, badCase{"Create/no key", rpcs["Create"], md(auth...), codes.InvalidArgument, wire.ReasonKeyMissing})
	huge := seedRequest("5")
	huge.Chain = strings.Repeat("9", 5<<20)
	cases = append(cases, badCase{"Create/over the message size limit", create(huge), withKey(wire.KeyHeader, key), codes.ResourceExhausted, ""})

	// Invalid fields: errors of the handler, stored for their key like any
	// result (the idempotency contract, docs/idempotency.md), so each uses a key of its own.
	fieldCase := func(name, field string, call rpc) {
		cases = append(cases, badCase{name, call, withKey(wire.KeyHeader, "field-"+name), codes.InvalidArgument, field})
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
		fieldCase("Create/bad "+field, field, create(req))
	}
	fieldCase("Create/unknown field", "#99", create(withUnknown(seedRequest("5")).(*paymentsv1.CreatePaymentIntentRequest)))
	fieldCase("Get/bad id", "id", get(&paymentsv1.GetPaymentIntentRequest{Id: "pi_XYZ"}))
	fieldCase("Get/unknown field", "#99", get(withUnknown(&paymentsv1.GetPaymentIntentRequest{Id: id}).(*paymentsv1.GetPaymentIntentRequest)))
	fieldCase("Cancel/bad id", "id", cancel(&paymentsv1.CancelPaymentIntentRequest{Id: ""}))
	fieldCase("Cancel/unknown field", "#99", cancel(withUnknown(&paymentsv1.CancelPaymentIntentRequest{Id: id}).(*paymentsv1.CancelPaymentIntentRequest)))
	fieldCase("List/negative page_size", "page_size", list(&paymentsv1.ListPaymentIntentsRequest{PageSize: -1}))
	fieldCase("List/forged page_token", "page_token", list(&paymentsv1.ListPaymentIntentsRequest{PageToken: "AXh4eHh4eHh4eA"}))
	fieldCase("List/garbage page_token", "page_token", list(&paymentsv1.ListPaymentIntentsRequest{PageToken: "%%%"}))
	fieldCase("List/unknown field", "#99", list(withUnknown(&paymentsv1.ListPaymentIntentsRequest{}).(*paymentsv1.ListPaymentIntentsRequest)))
	if _, err := d.client.ListPaymentIntents(withCreds("other-token", ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1}); err != nil {
		t.Fatal(err)
	}
	d.create(withCreds("other-token", "o1"), seedRequest("1"))
	d.create(withCreds("other-token", "o2"), seedRequest("2"))
	otherPage, err := d.client.ListPaymentIntents(withCreds("other-token", ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if err != nil || otherPage.NextPageToken == "" {
		t.Fatalf("other principal's first page: %v, %v", otherPage, err)
	}
	fieldCase("List/foreign page_token", "page_token", list(&paymentsv1.ListPaymentIntentsRequest{PageToken: otherPage.NextPageToken}))

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
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
		})
	}

	// Keys that grpc-go will not send, from a plain HTTP/2 client.
	for what, k := range map[string]string{"tab": "order\t1", "UTF-8": "café-1"} {
		for _, method := range []string{paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName} {
			var msg proto.Message = seedRequest("5")
			if strings.HasSuffix(method, "Cancel"+"PaymentIntent") {
				msg = &paymentsv1.CancelPaymentIntentRequest{Id: id}
			}
			code, text := rawCall(t, d.addr, method, msg, "authorization", "Bearer "+token, wire.KeyHeader, k)
			if code != codes.InvalidArgument || !strings.Contains(text, "idempotency-key") {
				t.Errorf("%s key %s: %v %q, want INVALID_ARGUMENT naming the idempotency-key", method, what, code, text)
			}
		}
	}

	// Requests that do not decode are the caller's fault, and use up no key.
	for what, body := range map[string][]byte{
		"invalid UTF-8 in a string": protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "evm:\xff"),
		"not a message":             {0xff, 0xff, 0xff, 0xff},
		"truncated field":           {0x0a, 0x10, 'e', 'v'},
	} {
		code, text := rawBytesCall(t, d.addr, paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, body,
			"authorization", "Bearer "+token, wire.KeyHeader, key)
		if code != codes.InvalidArgument || !strings.Contains(text, "CreatePaymentIntentRequest") {
			t.Errorf("request body %s: %v %q, want INVALID_ARGUMENT naming the request type", what, code, text)
		}
	}

	badHTTPInput(t, "http://"+d.logAddr(t, "http listening"), token, key, id)

	// Nothing of the above created an intent or claimed the reusable key.
	if got := d.list(t, token); len(got) != 1 || got[0].Id != id || got[0].State != paymentsv1.State_STATE_CREATED {
		t.Errorf("after the bad input: %v, want only the setup intent, still created", got)
	}
	fresh := d.create(withCreds(token, key), seedRequest("77"))
	if fresh.err != nil || fresh.replayed() {
		t.Errorf("the reusable key after every rejection: %v (replayed %t), want a fresh run", fresh.err, fresh.replayed())
	}
	// Valid edges: 255 printable characters, page_size 0 and huge.
	if a := d.create(withCreds(token, strings.Repeat("k", 255)), seedRequest("78")); a.err != nil {
		t.Errorf("255-character key: %v", a.err)
	}
	for _, size := range []int32{0, 1 << 30} {
		if _, err := d.client.ListPaymentIntents(withCreds(token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: size}); err != nil {
			t.Errorf("page_size %d: %v", size, err)
		}
	}
	// A real page token with one character appended is another token.
	page, err := d.client.ListPaymentIntents(withCreds(token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("first page: %v, token %q", err, page.GetNextPageToken())
	}
	for _, tok := range []string{page.NextPageToken + "A", page.NextPageToken + "_", page.NextPageToken[1:]} {
		_, err := d.client.ListPaymentIntents(withCreds(token, ""), &paymentsv1.ListPaymentIntentsRequest{PageToken: tok})
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
	type route struct{ method, path, body string }
	routes := map[string]route{
		"Create": {"POST", "/v1/payment_intents", `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"5"}`},
		"Get":    {"GET", "/v1/payment_intents/" + id, ""},
		"Cancel": {"POST", "/v1/payment_intents/" + id + "/cancel", ""},
		"List":   {"GET", "/v1/payment_intents", ""},
	}
	create := routes["Create"]
	withBody := func(body string) route { return route{create.method, create.path, body} }
	type badCase struct {
		name    string
		route   route
		headers []string
		status  int
		code    string // the problem's error
		field   string // the one field violation named, if any
	}
	authz := []string{"Authorization", "Bearer " + token}
	withKey := func(kv ...string) []string { return append(append([]string{}, authz...), kv...) }
	var cases []badCase
	for name, r := range routes {
		for what, h := range map[string][]string{
			"no authorization":   {"Idempotency-Key", key},
			"not Bearer":         {"Authorization", "Basic " + token, "Idempotency-Key", key},
			"empty token":        {"Authorization", "Bearer", "Idempotency-Key", key},
			"two authorizations": {"Authorization", "Bearer a", "Authorization", "Bearer b", "Idempotency-Key", key},
			"UTF-8 token":        {"Authorization", "Bearer café", "Idempotency-Key", key},
		} {
			cases = append(cases, badCase{name + "/" + what, r, h, http.StatusUnauthorized, "unauthenticated", ""})
		}
	}
	for _, name := range []string{"Create", "Cancel"} {
		for what, h := range map[string][]string{
			"key twice":               withKey("Idempotency-Key", key, "Idempotency-Key", key+"2"),
			"empty quoted key":        withKey("Idempotency-Key", `""`),
			"256-byte key":            withKey("Idempotency-Key", strings.Repeat("k", 256)),
			"tab in key":              withKey("Idempotency-Key", "order\t1"),
			"UTF-8 key":               withKey("Idempotency-Key", "café-1"),
			"unterminated quoted key": withKey("Idempotency-Key", `"`+key),
			"bad escape in key":       withKey("Idempotency-Key", `"a\x"`),
			"key with parameters":     withKey("Idempotency-Key", `"`+key+`";x=1`),
			"two keys merged":         withKey("Idempotency-Key", key+", "+key+"2"),
			"two quoted keys merged":  withKey("Idempotency-Key", `"`+key+`", "`+key+`2"`),
			"comma in a quoted key":   withKey("Idempotency-Key", `"`+key+`,2"`),
		} {
			cases = append(cases, badCase{name + "/" + what, routes[name], h, http.StatusBadRequest, "idempotency_key_invalid", ""})
		}
	}
	cases = append(cases,
		badCase{"Create/no key", create, authz, http.StatusBadRequest, "idempotency_key_missing", ""},
		badCase{"Create/over 1 MiB", withBody(`{"chain":"` + strings.Repeat("9", 1<<20) + `"}`), withKey("Idempotency-Key", key), http.StatusRequestEntityTooLarge, "request_too_large", ""},
		badCase{"Create/form content type", create, withKey("Idempotency-Key", key, "Content-Type", "application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		badCase{"Create/two content types", create, withKey("Idempotency-Key", key, "Content-Type", "application/json", "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		badCase{"Create/text content type", create, withKey("Idempotency-Key", key, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type", ""},
		badCase{"Create/not JSON", withBody("amount=5"), withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Create/unknown JSON field", withBody(`{"amount":"5","tip":"1"}`), withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Create/two JSON values", withBody(`{"amount":"5"}{"amount":"6"}`), withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Create/invalid UTF-8 in a string", withBody("{\"chain\":\"evm:\xff\"}"), withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Create/amount as a number", withBody(`{"amount":5}`), withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Cancel/unknown JSON field", route{"POST", "/v1/payment_intents/" + id + "/cancel", `{"reason":"x"}`}, withKey("Idempotency-Key", key), http.StatusBadRequest, "invalid_argument", ""},
		badCase{"List/page_size not a number", route{"GET", "/v1/payment_intents?page_size=ten", ""}, authz, http.StatusBadRequest, "invalid_argument", ""},
		badCase{"Get/unknown intent", route{"GET", "/v1/payment_intents/pi_000000000000000000000000", ""}, authz, http.StatusNotFound, "not_found", ""},
		badCase{"no such route", route{"GET", "/v1/payment_intent", ""}, authz, http.StatusNotFound, "route_not_found", ""},
		badCase{"Get/wrong method", route{"PUT", "/v1/payment_intents/" + id, ""}, authz, http.StatusMethodNotAllowed, "method_not_allowed", ""},
	)
	// Invalid fields: errors of the handler, stored for their key like any
	// result, so each uses a key of its own.
	seed := create.body
	for field, body := range map[string]string{
		"chain":              strings.Replace(seed, "evm:31337", "evm:abc", 1),
		"token":              strings.Replace(seed, "0x5FbDB2315678afecb367f032d93F642f64180aa3", "0x12", 1),
		"amount":             strings.Replace(seed, `"5"`, `"0"`, 1),
		"expires_in_seconds": strings.Replace(seed, `"amount"`, `"expires_in_seconds":10,"amount"`, 1),
	} {
		cases = append(cases, badCase{"Create/bad " + field, withBody(body), withKey("Idempotency-Key", "http-field-"+field), http.StatusBadRequest, "invalid_argument", field})
	}
	cases = append(cases,
		badCase{"Get/bad id", route{"GET", "/v1/payment_intents/pi_XYZ", ""}, authz, http.StatusBadRequest, "invalid_argument", "id"},
		badCase{"List/negative page_size", route{"GET", "/v1/payment_intents?page_size=-1", ""}, authz, http.StatusBadRequest, "invalid_argument", "page_size"},
		badCase{"List/garbage page_token", route{"GET", "/v1/payment_intents?page_token=%25%25%25", ""}, authz, http.StatusBadRequest, "invalid_argument", "page_token"},
	)

	for _, tc := range cases {
		t.Run("HTTP/"+tc.name, func(t *testing.T) {
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
		})
	}
}
