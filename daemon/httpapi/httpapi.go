package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/daemon"
	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// MaxBodyBytes is the largest request body accepted.
// A larger one is answered 413 before anything reads it as JSON.
const MaxBodyBytes = 1 << 20

// The response headers of the idempotency contract, in their HTTP spelling.
const (
	ReplayedHeader  = "Idempotent-Replayed"
	ExpiresAtHeader = "Idempotency-Expires-At"
)

// New returns the HTTP/JSON API. Each of its calls is a call of conn,
// a connection to the server that does the work (see Dial).
// Callers are authenticated by authn, as the server authenticates its
// gRPC callers. Each call passes its principal, or why it has none, to
// the server (see ServerCredentials). New also serves the API's OpenAPI
// document at GET /v1/openapi.json.
func New(conn grpc.ClientConnInterface, authn *auth.Authenticator) http.Handler {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonMarshaler{}),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithForwardResponseOption(created),
		runtime.WithErrorHandler(handleError),
		runtime.WithRoutingErrorHandler(handleRoutingError),
		runtime.WithDisableHTTPMethodOverride(), // a POST is a POST
		runtime.WithDisablePathLengthFallback(), // even form-typed: not a GET where only GET is routed, but 405 with its Allow
		runtime.WithMetadata(forwardCaller),
		runtime.WithMiddlewares(probe, textParams),
	)
	// Neither can fail. Registering a client only adds routes, and the
	// path is a constant the mux accepts.
	_ = paymentsv1.RegisterPaymentIntentServiceHandlerClient(context.Background(), mux, paymentsv1.NewPaymentIntentServiceClient(conn))
	if err := mux.HandlePath(http.MethodGet, "/v1/openapi.json", serveOpenAPI); err != nil {
		panic(err)
	}
	return guard(mux, authn)
}

// NewServer returns an http.Server for h, with the limits a listener open
// to clients needs. It closes slow or idle connections rather than keep
// them.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // headers and a body of at most MaxBodyBytes
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// guard echoes each Idempotency-Key of the request on its answer, any
// answer. Then it refuses what the gateway should not see.
// A body over MaxBodyBytes is 413, and a body that is not JSON is 415.
// An Idempotency-Key that names no key is 400, and so is a cancel that
// names two intents. It leaves the body read and buffered, each key
// decoded, and the caller authenticated. The outcome of authentication
// rides in the request's context to forwardCaller. The Authorization
// header, once read, goes no further.
func guard(next http.Handler, authn *auth.Authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echoKeys(w.Header(), r.Header)
		// Authenticated first, so that the log line of every refusal
		// below names its caller. A failure is answered in its turn
		// (forwardCaller).
		principal, authErr := authn.AuthenticateConn(r.Header.Values("Authorization"), r.TLS)
		r.Header.Del("Authorization")
		info := infoOf(r.Context())
		if authErr == nil {
			info.principal = auth.PrincipalHash(principal)
		}
		if keys := r.Header[keyHeader]; len(keys) > 0 {
			info.key = keys[0] // as sent, until decoded
		}
		if r.ContentLength > MaxBodyBytes {
			httpProblem(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is %d bytes; the limit is %d", r.ContentLength, MaxBodyBytes))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			httpProblem(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is larger than the limit of %d bytes", MaxBodyBytes))
			return
		case err != nil:
			httpProblem(w, http.StatusBadRequest, "invalid_body", "the body could not be read: "+err.Error())
			return
		}
		if detail := notJSON(r.Header, body); detail != "" {
			httpProblem(w, http.StatusUnsupportedMediaType, codeUnsupportedMedia, detail)
			return
		}
		if err := decodeKeys(r.Header); err != nil {
			httpProblem(w, http.StatusBadRequest, codeKeyInvalid, "invalid Idempotency-Key: "+err.Error())
			return
		}
		if keys := r.Header[keyHeader]; len(keys) > 0 {
			info.key = keys[0]
		}
		if detail := twoIntents(r.URL.Path, body); detail != "" {
			httpProblem(w, http.StatusBadRequest, "invalid_argument", detail)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller{principal, authErr})))
	})
}

// caller is the outcome of authenticating an HTTP request.
type caller struct {
	principal string
	err       error
}

type callerKey struct{}

// forwardCaller passes the request's principal to the server. When there
// is none, it passes the refusal instead. The server answers the refusal
// as it would over gRPC, after the codec's checks. The checks of guard
// (body, Content-Type, Idempotency-Key) come before it. The refusal's
// message is escaped to printable ASCII, all that metadata may carry.
func forwardCaller(ctx context.Context, r *http.Request) metadata.MD {
	c, _ := r.Context().Value(callerKey{}).(caller)
	if c.err != nil {
		return metadata.Pairs(auth.ForwardedRefusalHeader, printable(status.Convert(c.err).Message()))
	}
	return metadata.Pairs(auth.ForwardedPrincipalHeader, c.principal)
}

// printable escapes what is not printable ASCII in s, as %+q would.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			q := strconv.QuoteToASCII(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// twoIntents says what is wrong with a cancel whose body names another
// intent than its path. The gateway would cancel the path's intent and
// ignore the body's. It returns "" when nothing is wrong.
// A path with an empty id names no intent. A body that then names one is
// told to put it in the path. An empty id in the body names none, as
// protojson reads it. A client that sends every field, as this face
// answers, sends such an empty id. A body that does not decode is left to
// the gateway.
func twoIntents(path string, body []byte) string {
	id, ok := strings.CutPrefix(path, "/v1/payment_intents/")
	if !ok || len(body) == 0 {
		return ""
	}
	if id, ok = strings.CutSuffix(id, "/cancel"); !ok || strings.Contains(id, "/") {
		return ""
	}
	var named struct {
		ID *string `json:"id"`
	}
	if json.Unmarshal(body, &named) != nil || named.ID == nil || *named.ID == "" || *named.ID == id {
		return ""
	}
	return fmt.Sprintf("the path names intent %q and the body %q: send the id in the path alone", id, *named.ID)
}

// notJSON says why a request with headers h and body is not to be read as
// JSON. It returns "" if it is.
// Two Content-Type lines are refused, not settled by believing the first.
// A proxy, or a server behind one, may read the other line. The type of
// the body is then unknown, which is 415 like a type that is not JSON.
// A proxy may also merge the lines into one, "a, b", a type that does not
// parse. That too is 415, so merged or not, the answer is the same.
// Without a body the type describes nothing and is not read.
func notJSON(h http.Header, body []byte) string {
	cts := h.Values("Content-Type")
	switch {
	case len(body) == 0:
		return ""
	case len(cts) > 1:
		return fmt.Sprintf("%d Content-Type header lines, %q: send one, Content-Type: application/json", len(cts), cts)
	case len(cts) == 1 && !isJSON(cts[0]):
		return fmt.Sprintf("Content-Type %q is not accepted: send the body as JSON, with Content-Type: application/json (curl: -H 'Content-Type: application/json', or --json)", cts[0])
	}
	return ""
}

// isJSON reports whether a body of Content-Type ct is to be read as JSON.
// That is application/json in UTF-8, or no type declared.
func isJSON(ct string) bool {
	if ct == "" {
		return true
	}
	typ, params, err := mime.ParseMediaType(ct)
	if err != nil || typ != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// incomingHeader forwards headers the gateway would not. It forwards the
// idempotency key, as guard decoded it. It forwards the W3C trace context,
// so that an HTTP caller's trace continues into the server's span.
// The gateway would forward Authorization, but guard reads and removes it.
// The server gets the principal instead (see forwardCaller).
// Every other header stays out of the metadata the interceptors read.
func incomingHeader(h string) (string, bool) {
	switch h {
	case keyHeader:
		return wire.KeyHeader, true
	case "Traceparent", "Tracestate":
		return strings.ToLower(h), true
	}
	return "", false
}

// outgoingHeader lets the answer's idempotency headers through.
// It keeps back the rest of the server's metadata.
func outgoingHeader(key string) (string, bool) {
	switch key {
	case wire.ReplayedHeader:
		return ReplayedHeader, true
	case wire.ExpiresAtHeader:
		return ExpiresAtHeader, true
	}
	return "", false
}

// forwardHeaders sets on h the headers of md that outgoingHeader lets
// through. The gateway does the same for answers that are not errors.
func forwardHeaders(h http.Header, md metadata.MD) {
	for k, vs := range md {
		if name, ok := outgoingHeader(k); ok {
			for _, v := range vs {
				h.Add(name, v)
			}
		}
	}
}

// created answers a create with 201 Created and the intent's Location.
// A replay gets the same answer as the first. The status follows from the
// stored response, not from whether the handler ran now.
func created(_ context.Context, w http.ResponseWriter, resp proto.Message) error {
	if r, ok := resp.ProtoReflect().Interface().(*paymentsv1.CreatePaymentIntentResponse); ok {
		w.Header().Set("Location", "/v1/payment_intents/"+url.PathEscape(r.GetPaymentIntent().GetId()))
		w.WriteHeader(http.StatusCreated)
	}
	return nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(daemon.OpenAPI)
}
