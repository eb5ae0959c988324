package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// problemType prefixes each error code to make the problem's type URI.
// It is a tag URI (RFC 4151). That names the kind of problem without
// promising a page to fetch.
const problemType = "tag:paymentsd.github.io,2026:"

// problemContentType is the media type of every error answer (RFC 9457).
const problemContentType = "application/problem+json"

// The error codes of the HTTP face that no gRPC status carries.
const (
	codeTooLarge          = "request_too_large"
	codeUnsupportedMedia  = "unsupported_media_type"
	codeRouteNotFound     = "route_not_found"
	codeMethodNotAllowed  = "method_not_allowed"
	codeKeyInvalid        = "idempotency_key_invalid"
	defaultUnavailableSec = 1 // Retry-After of an UNAVAILABLE that gives no delay
)

// keyReasons are the interceptor's own errors. Their status and code
// differ from those of the gRPC code they share with other errors.
var keyReasons = map[string]struct {
	status int
	code   string
	title  string
}{
	wire.ReasonKeyReused:         {http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency key already used for another request"},
	wire.ReasonKeyInUse:          {http.StatusConflict, "idempotency_key_in_use", "A request with this idempotency key is in progress"},
	wire.ReasonKeyMissing:        {http.StatusBadRequest, "idempotency_key_missing", "Idempotency key required"},
	wire.ReasonKeyInvalid:        {http.StatusBadRequest, codeKeyInvalid, "Invalid idempotency key"},
	wire.ReasonAttemptSuperseded: {http.StatusConflict, "idempotency_attempt_superseded", "Superseded by a newer attempt"},
	wire.ReasonWriteConflict:     {http.StatusConflict, "idempotency_write_conflict", "Other requests kept changing the same data"},
	wire.ReasonOutcomeUnknown:    {http.StatusServiceUnavailable, "idempotency_outcome_unknown", "Unknown whether the request was kept"},
}

// problemFromStatus is the HTTP answer to a gRPC status. It returns the
// problem and the headers that go with its status (Retry-After,
// WWW-Authenticate).
func problemFromStatus(st *status.Status) (*paymentsv1.Problem, http.Header) {
	httpStatus := runtime.HTTPStatusFromCode(st.Code())
	p := &paymentsv1.Problem{
		Error:  snake(st.Code().String()),
		Title:  http.StatusText(httpStatus),
		Detail: st.Message(),
	}
	h := http.Header{}
	var retry *errdetails.RetryInfo
	var inUse *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			k, ok := keyReasons[d.GetReason()]
			if !ok || d.GetDomain() != wire.ErrorDomain {
				continue
			}
			httpStatus, p.Error, p.Title = k.status, k.code, k.title
			if d.GetReason() == wire.ReasonKeyInUse {
				inUse = d
			}
			if d.GetReason() == wire.ReasonKeyMissing {
				// The server's words name the gRPC method. An HTTP
				// client knows its route and needs the header's name.
				p.Detail = "this request requires an Idempotency-Key header: a key of your choosing, the same on every retry of the request"
			}
			if d.GetReason() == wire.ReasonKeyReused && d.GetMetadata()["stored_scheme"] == "" {
				// The seed's wording, in the header's HTTP spelling.
				m := d.GetMetadata()
				p.Detail = fmt.Sprintf("Idempotency-Key %q was already used for a different request (fingerprint %s, got %s)",
					m["idempotency_key"], m["stored_fingerprint"], m["request_fingerprint"])
			}
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				p.FieldViolations = append(p.FieldViolations, &paymentsv1.Problem_FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	switch {
	case retry != nil:
		secs := retryAfter(retry)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		if inUse != nil {
			p.Detail = inUseDetail(inUse.GetMetadata()["idempotency_key"], secs)
		}
	case st.Code() == codes.Unavailable:
		h.Set("Retry-After", strconv.Itoa(defaultUnavailableSec))
	case st.Code() == codes.Unauthenticated:
		h.Set("WWW-Authenticate", `Bearer realm="paymentsd"`)
	}
	p.Status = int32(httpStatus)
	return p, h
}

// retryAfter is the Retry-After of a RetryInfo: whole seconds, rounded
// up, and at least one. A client told 0 would only ask again at once.
func retryAfter(retry *errdetails.RetryInfo) int64 {
	return max(1, int64(math.Ceil(retry.GetRetryDelay().AsDuration().Seconds())))
}

// inUseDetail is the detail of a 409 for key in flight. It names the
// delay its Retry-After carries, secs, not the server's words: those name
// the RetryInfo's delay, which may be under the second a header can say.
func inUseDetail(key string, secs int64) string {
	after := (time.Duration(secs) * time.Second).String()
	if key == "" {
		return "a request with this Idempotency-Key is still in progress; retry after " + after
	}
	return fmt.Sprintf("a request with Idempotency-Key %q is still in progress; retry after %s", key, after)
}

// snake turns a gRPC code's name into the error code of its problem:
// InvalidArgument becomes invalid_argument.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// problemJSON encodes problems: snake_case names like every answer, and
// no empty field_violations.
var problemJSON = protojson.MarshalOptions{UseProtoNames: true}

// writeProblem writes p as the answer, with the headers in h.
func writeProblem(w http.ResponseWriter, p *paymentsv1.Problem, h http.Header) {
	p.Type = problemType + p.Error
	if p.Title == "" {
		p.Title = http.StatusText(int(p.Status))
	}
	// A detail that quotes the request may hold bytes that are not UTF-8.
	// Such bytes make protojson fail, and the answer would be a bare 500.
	p.Detail = strings.ToValidUTF8(p.Detail, "\uFFFD")
	for _, v := range p.FieldViolations {
		v.Field, v.Description = strings.ToValidUTF8(v.Field, "\uFFFD"), strings.ToValidUTF8(v.Description, "\uFFFD")
	}
	body, err := marshalCompact(problemJSON, p)
	if err != nil { // unreachable: a Problem always encodes
		body = []byte(fmt.Sprintf(`{"type":"%sinternal","title":"Internal Server Error","status":500,"error":"internal"}`, problemType))
		p.Status = http.StatusInternalServerError
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(p.Status))
	w.Write(body)
}

// httpProblem writes an error of the HTTP face itself, found before any
// gRPC call.
func httpProblem(w http.ResponseWriter, status int, code, detail string) {
	p := &paymentsv1.Problem{Status: int32(status), Error: code, Detail: detail}
	for _, k := range keyReasons { // a code the interceptor also answers with has one title
		if k.code == code {
			p.Title = k.title
		}
	}
	writeProblem(w, p, nil)
}

// handleError is the gateway's error handler. Every error of a call is
// answered as a problem, whether from the gRPC server or from decoding the
// request. The answer has the idempotency headers the server sent.
func handleError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
		forwardHeaders(w.Header(), md.HeaderMD)
	}
	// The mux's own refusals, such as a malformed %-escape in the path,
	// are not gRPC statuses. They would otherwise be answered 500.
	var hse *runtime.HTTPStatusError
	if errors.As(err, &hse) {
		httpProblem(w, hse.HTTPStatus, snake(strings.ReplaceAll(http.StatusText(hse.HTTPStatus), " ", "")), hse.Err.Error())
		return
	}
	p, h := problemFromStatus(status.Convert(err))
	writeProblem(w, p, h)
}

// handleRoutingError answers a path or method the API does not have.
// A 405 says in Allow which methods the path takes, as RFC 9110 requires.
// The path is named as the client escaped it. That is text even where the
// decoded path is not UTF-8.
func handleRoutingError(_ context.Context, mux *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if isProbe(r) {
		return
	}
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		allow := allowed(mux, r)
		w.Header().Set("Allow", allow)
		httpProblem(w, httpStatus, codeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s; it takes %s", r.Method, r.URL.EscapedPath(), allow))
	case http.StatusNotFound:
		httpProblem(w, httpStatus, codeRouteNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.EscapedPath()))
	default:
		httpProblem(w, httpStatus, snake(strings.ReplaceAll(http.StatusText(httpStatus), " ", "")), http.StatusText(httpStatus))
	}
}
