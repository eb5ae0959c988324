package rpclog

import (
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
)

// intentID is the id of the payment intent resp carries (a create's, a
// get's or a cancel's), "" when it carries none. A response the
// interceptor answers as stored bytes is read without being decoded:
// field 1 of the response, the intent, and field 1 of that, its id.
func intentID(resp any) string {
	switch r := resp.(type) {
	case interface {
		GetPaymentIntent() *paymentsv1.PaymentIntent
	}:
		return r.GetPaymentIntent().GetId()
	case *interceptor.StoredResponse:
		typeURL, b := r.Encoded()
		switch typeURL[strings.LastIndexByte(typeURL, '/')+1:] {
		case "payments.v1.CreatePaymentIntentResponse", "payments.v1.GetPaymentIntentResponse", "payments.v1.CancelPaymentIntentResponse":
			return string(field1(field1(b)))
		}
	}
	return ""
}

// field1 is the value of field 1, of the length-delimited wire type, in
// the encoded message b, or nil. The encoder writes it once; of several,
// the last.
func field1(b []byte) []byte {
	var v []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			v, b = val, b[m:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return v
}
