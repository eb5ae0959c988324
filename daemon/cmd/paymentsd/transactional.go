//go:build !robustness_durable

package main

import paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"

// transactionalMethods are the methods whose only effect is the intent they
// write through the store. Their claim commits with those writes
// (interceptor.WithTransactional), so it needs no lease. Every build but
// the robustness suite's test build (transactional_durable.go) has this
// list.
var transactionalMethods = []string{
	paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName,
	paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName,
}
