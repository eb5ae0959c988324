package httpapi

import (
	"testing"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

func TestDecodeError_NamesNestedFieldsByTheirPath(t *testing.T) {
	md := (&paymentsv1.CreatePaymentIntentResponse{}).ProtoReflect().Descriptor()
	for _, tc := range []struct{ body, want string }{
		{`{"payment_intent":{"amout":"1"}}`, `unknown field "payment_intent.amout"`},
		{`{"paymentIntent":{"createTime":"yesterday"}}`, `field "paymentIntent.createTime": want an RFC 3339 time, as a string such as "2026-01-02T15:04:05Z"`},
		{`{"payment_intent":{"state":"STATE_PAID"}}`, `field "payment_intent.state": want one of STATE_UNSPECIFIED`},
		{`{"payment_intent":[]}`, `field "payment_intent": want an object`},
		{`{"payment_intent":{"version":"1.5"}}`, `field "payment_intent.version": want a whole number, as a string of digits`},
		{`{"payment_intent":{},"paymentIntent":{}}`, `field "paymentIntent" is sent twice (as "payment_intent" and "paymentIntent")`},
		{`{`, `the body is not valid JSON (at byte 1): send one JSON object`},
	} {
		got := (jsonMarshaler{}).Unmarshal([]byte(tc.body), &paymentsv1.CreatePaymentIntentResponse{})
		if got == nil || len(got.Error()) < len(tc.want) || got.Error()[:len(tc.want)] != tc.want {
			t.Errorf("%s: %v, want %s…", tc.body, got, tc.want)
		}
	}
	if err := decodeError([]byte(`{}`), md); err == nil || err.Error() != "the body does not decode as the request" {
		t.Errorf("a body protojson refused for no reason found: %v", err)
	}
}
