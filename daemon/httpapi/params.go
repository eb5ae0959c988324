package httpapi

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// textParams is the mux's middleware for path and query parameters.
// It refuses one that is not UTF-8 once its %-escapes are decoded, such as
// /v1/payment_intents/%ff. The answer is 400 invalid_argument.
// A request's strings must be UTF-8. Otherwise the call would fail to
// encode, which gRPC answers INTERNAL. A query parameter that no field
// reads is refused too, for one rule on every route. It runs before the
// call, so nothing is stored.
func textParams(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		var bad []*paymentsv1.Problem_FieldViolation
		for _, name := range slices.Sorted(maps.Keys(params)) {
			if v := params[name]; !utf8.ValidString(v) {
				bad = append(bad, notText(name, "the path", v))
			}
		}
		query, _ := url.ParseQuery(r.URL.RawQuery) // the gateway answers a malformed query itself
		for _, name := range slices.Sorted(maps.Keys(query)) {
			for _, v := range query[name] {
				if !utf8.ValidString(name) || !utf8.ValidString(v) {
					bad = append(bad, notText(name, "the query", v))
				}
			}
		}
		if len(bad) == 0 {
			next(w, r, params)
			return
		}
		writeProblem(w, &paymentsv1.Problem{
			Status:          http.StatusBadRequest,
			Error:           "invalid_argument",
			Detail:          fmt.Sprintf("%s: a parameter is not UTF-8 text once its %%-escapes are decoded", r.URL.EscapedPath()),
			FieldViolations: bad,
		}, nil)
	}
}

// notText is the violation of parameter name, found in where, whose value
// v is not UTF-8. Both name and v are escaped, as they cannot be written
// as they are.
func notText(name, where, v string) *paymentsv1.Problem_FieldViolation {
	return &paymentsv1.Problem_FieldViolation{
		Field:       printable(name),
		Description: fmt.Sprintf("in %s: must be UTF-8 text, got %+q", where, v),
	}
}
