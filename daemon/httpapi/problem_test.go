package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paymentsd/paymentsd/wire"
)

func withDetails(t *testing.T, code codes.Code, msg string, details ...protoadapt.MessageV1) *status.Status {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func info(reason string, meta map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain, Metadata: meta}
}

// problemCase is a gRPC status and the problem it must become. The status
// is code, msg and details; the test builds it, so a detail that cannot
// be packed fails the test, not the package.
type problemCase struct {
	name       string
	code       codes.Code
	msg        string
	details    []protoadapt.MessageV1
	wantStatus int
	wantError  string
	wantDetail string // "" to skip
	wantHeader map[string]string
	wantFields []string
}

// problemCases are the statuses the interceptor and the service return,
// and a few of other domains, each with its HTTP status, error and headers.
var problemCases = []problemCase{
	{
		name: "reused key: the seed's 422",
		code: codes.FailedPrecondition, msg: `idempotency key "order-1001" was already used for a different request (fingerprint ff330e75a93099c4, got 90f56163d6f6ee6b)`,
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyReused, map[string]string{"idempotency_key": "order-1001", "stored_fingerprint": "ff330e75a93099c4", "request_fingerprint": "90f56163d6f6ee6b"})},
		wantStatus: 422, wantError: "idempotency_key_reused",
		wantDetail: `Idempotency-Key "order-1001" was already used for a different request (fingerprint ff330e75a93099c4, got 90f56163d6f6ee6b)`,
	},
	{
		name: "reused key of another fingerprint scheme keeps the server's words",
		code: codes.FailedPrecondition, msg: "scheme message",
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyReused, map[string]string{"idempotency_key": "k", "stored_scheme": "a", "request_scheme": "b"})},
		wantStatus: 422, wantError: "idempotency_key_reused", wantDetail: "scheme message",
	},
	{
		name: "in flight: 409, Retry-After rounded up, and the detail names it",
		code: codes.Aborted, msg: `a request with idempotency key "k" is still in progress; retry after 1.2s`,
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyInUse, map[string]string{"idempotency_key": "k"}), &errdetails.RetryInfo{RetryDelay: durationpb.New(1200 * time.Millisecond)}},
		wantStatus: 409, wantError: "idempotency_key_in_use", wantHeader: map[string]string{"Retry-After": "2"},
		wantDetail: `a request with Idempotency-Key "k" is still in progress; retry after 2s`,
	},
	{
		name: "in flight under a second: Retry-After 1, and the detail names it",
		code: codes.Aborted, msg: `a request with idempotency key "k" is still in progress; retry after 10ms`,
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyInUse, map[string]string{"idempotency_key": "k"}), &errdetails.RetryInfo{RetryDelay: durationpb.New(10 * time.Millisecond)}},
		wantStatus: 409, wantError: "idempotency_key_in_use", wantHeader: map[string]string{"Retry-After": "1"},
		wantDetail: `a request with Idempotency-Key "k" is still in progress; retry after 1s`,
	},
	{
		name: "in flight with no delay left and no key named: Retry-After 1, and the detail names it",
		code: codes.Aborted, msg: "retry after 0s",
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyInUse, nil), &errdetails.RetryInfo{RetryDelay: durationpb.New(0)}},
		wantStatus: 409, wantError: "idempotency_key_in_use", wantHeader: map[string]string{"Retry-After": "1"},
		wantDetail: "a request with this Idempotency-Key is still in progress; retry after 1s",
	},
	{
		name: "missing key: the header named, not the gRPC method",
		code: codes.InvalidArgument, msg: "/payments.v1.PaymentIntentService/CreatePaymentIntent requires an idempotency-key header",
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyMissing, nil)},
		wantStatus: 400, wantError: "idempotency_key_missing",
		wantDetail: "this request requires an Idempotency-Key header: a key of your choosing, the same on every retry of the request",
	},
	{
		name: "invalid key", code: codes.InvalidArgument, msg: "bad key",
		details:    []protoadapt.MessageV1{info(wire.ReasonKeyInvalid, nil)},
		wantStatus: 400, wantError: "idempotency_key_invalid",
	},
	{
		name: "superseded attempt", code: codes.Aborted, msg: "superseded",
		details:    []protoadapt.MessageV1{info(wire.ReasonAttemptSuperseded, nil)},
		wantStatus: 409, wantError: "idempotency_attempt_superseded",
	},
	{
		name: "writes that kept losing to other requests", code: codes.Aborted, msg: "conflict",
		details:    []protoadapt.MessageV1{info(wire.ReasonWriteConflict, nil)},
		wantStatus: 409, wantError: "idempotency_write_conflict",
	},
	{
		name: "a commit whose outcome is unknown: 503, Retry-After", code: codes.Unavailable, msg: "unknown",
		details:    []protoadapt.MessageV1{info(wire.ReasonOutcomeUnknown, nil)},
		wantStatus: 503, wantError: "idempotency_outcome_unknown", wantHeader: map[string]string{"Retry-After": "1"},
	},
	{
		name: "a reason of another domain is not the interceptor's", code: codes.Aborted, msg: "other",
		details:    []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: wire.ReasonKeyInUse, Domain: "elsewhere"}},
		wantStatus: 409, wantError: "aborted",
	},
	{
		name: "no credential", code: codes.Unauthenticated, msg: "send a token",
		wantStatus: 401, wantError: "unauthenticated", wantDetail: "send a token",
		wantHeader: map[string]string{"WWW-Authenticate": `Bearer realm="paymentsd"`},
	},
	{
		name: "unknown intent", code: codes.NotFound, msg: "no intent pi_x",
		wantStatus: 404, wantError: "not_found",
	},
	{
		name: "invalid fields", code: codes.InvalidArgument, msg: "invalid request",
		details: []protoadapt.MessageV1{&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "amount", Description: "must be positive"}, {Field: "chain", Description: "evm:<id>"}}}},
		wantStatus: 400, wantError: "invalid_argument", wantFields: []string{"amount", "chain"},
	},
	{
		name: "store unavailable", code: codes.Unavailable, msg: "storage failed",
		wantStatus: 503, wantError: "unavailable", wantHeader: map[string]string{"Retry-After": "1"},
	},
	{
		name: "deadline", code: codes.DeadlineExceeded, msg: "late",
		wantStatus: 504, wantError: "deadline_exceeded",
	},
}

func TestProblemFromStatus_StatusCodeAndHeaders(t *testing.T) {
	for _, tc := range problemCases {
		t.Run(tc.name, func(t *testing.T) {
			p, h := problemFromStatus(withDetails(t, tc.code, tc.msg, tc.details...))
			if int(p.Status) != tc.wantStatus || p.Error != tc.wantError {
				t.Errorf("status %d, error %q; want %d, %q", p.Status, p.Error, tc.wantStatus, tc.wantError)
			}
			if tc.wantDetail != "" && p.Detail != tc.wantDetail {
				t.Errorf("detail %q, want %q", p.Detail, tc.wantDetail)
			}
			if p.Title == "" {
				t.Error("no title")
			}
			for k, v := range tc.wantHeader {
				if got := h.Get(k); got != v {
					t.Errorf("header %s %q, want %q", k, got, v)
				}
			}
			if len(tc.wantHeader) == 0 && len(h) != 0 {
				t.Errorf("headers %v, want none", h)
			}
			var fields []string
			for _, v := range p.FieldViolations {
				fields = append(fields, v.Field)
			}
			if len(fields) != len(tc.wantFields) || (len(fields) > 0 && fields[0] != tc.wantFields[0]) {
				t.Errorf("field violations %v, want %v", fields, tc.wantFields)
			}
		})
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"":                                  true,
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"Application/JSON; charset=UTF-8":   true,
		"application/json; charset=latin1":  false,
		"application/x-www-form-urlencoded": false,
		"text/plain":                        false,
		"application/jsonx":                 false,
		"garbage;;":                         false,
	} {
		if got := isJSON(ct); got != want {
			t.Errorf("isJSON(%q) = %t, want %t", ct, got, want)
		}
	}
}

func TestHandleError_MuxStatusIsProblemWithItsStatus(t *testing.T) {
	w := httptest.NewRecorder()
	err := &runtime.HTTPStatusError{HTTPStatus: http.StatusBadRequest, Err: errors.New("malformed %-escape")}
	handleError(context.Background(), nil, nil, w, httptest.NewRequest("GET", "/v1/payment_intents/x", nil), err)
	if w.Code != 400 || w.Header().Get("Content-Type") != problemContentType || !strings.Contains(w.Body.String(), `"error":"bad_request"`) {
		t.Errorf("%d %s %s; want a 400 bad_request problem", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}
