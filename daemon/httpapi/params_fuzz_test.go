package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

func (s *requestSink) GetPaymentIntent(_ context.Context, req *paymentsv1.GetPaymentIntentRequest) (*paymentsv1.GetPaymentIntentResponse, error) {
	s.keep(req)
	return &paymentsv1.GetPaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: req.Id}}, nil
}

func (s *requestSink) ListPaymentIntents(_ context.Context, req *paymentsv1.ListPaymentIntentsRequest) (*paymentsv1.ListPaymentIntentsResponse, error) {
	s.keep(req)
	return &paymentsv1.ListPaymentIntentsResponse{NextPageToken: req.PageToken}, nil
}

// FuzzPathAndQuery_NeverInternal sends request targets, as a server reads
// them off the wire, through the whole HTTP face to a server in memory
// that answers every call. No answer is a 5xx; every error is a problem
// that decodes, in UTF-8; every answer echoes the Idempotency-Key; and a
// path or query that is not UTF-8 once decoded never reaches the server.
func FuzzPathAndQuery_NeverInternal(f *testing.F) {
	for _, seed := range []struct{ method, suffix, query string }{
		{"GET", "", ""}, {"GET", "/%ff", ""}, {"POST", "/%ff/cancel", ""}, {"GET", "", "page_token=%ff"},
		{"GET", "", "%ff=1"}, {"GET", "/pi_1", "x=%ff"}, {"GET", "/a%2fb", ""}, {"GET", "/%zz", ""},
		{"DELETE", "/%ff", ""}, {"GET", "/\xff", ""}, {"POST", "", "a=%ff"}, {"GET", "/%c3%a9", "page_size=%ff"},
		{"PUT", "/x/%ff/y", ""}, {"GET", "", "page_size=2&page_token=caf%c3%a9"}, {"POST", "//cancel", ""},
	} {
		f.Add(seed.method, seed.suffix, seed.query)
	}
	sink, h := sinkFace(f)
	f.Fuzz(func(t *testing.T, method, suffix, query string) {
		target := "/v1/payment_intents" + suffix
		if query != "" {
			target += "?" + query
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz\r\nIdempotency-Key: k\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil || req.URL.Path == "" {
			return // net/http refuses it before any handler
		}
		req = req.WithContext(context.Background())
		req.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		got := sink.take()

		if w.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, target, w.Code, w.Body)
		}
		if k := w.Header().Values("Idempotency-Key"); len(k) != 1 || k[0] != "k" {
			t.Fatalf("%s %q: Idempotency-Key %q on the answer, want [k]", method, target, k)
		}
		if w.Code >= 400 {
			var p struct{ Error string }
			if !utf8.Valid(w.Body.Bytes()) || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Error == "" {
				t.Fatalf("%s %q: %d %q, want a problem in UTF-8", method, target, w.Code, w.Body)
			}
		}
		if text(req.URL.Path, req.URL.RawQuery) {
			return
		}
		if got != nil || w.Code < 400 {
			t.Fatalf("%s %q, not UTF-8: %d %s, and the server got %v", method, target, w.Code, w.Body, got)
		}
	})
}

// text reports whether path and every name and value of query are UTF-8
// once their escapes are decoded.
func text(path, query string) bool {
	values, _ := url.ParseQuery(query)
	for k, vs := range values {
		for _, v := range vs {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return false
			}
		}
	}
	return utf8.ValidString(path)
}
