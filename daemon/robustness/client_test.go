package robustness

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// tokens are the principals' bearer tokens; the servers run in dev mode,
// where each token is a principal of its own.
var tokens = []string{"robustness-a", "robustness-b"}

// endpoint is one server as the clients reach it: its gRPC and HTTP
// addresses, through the proxies that cut connections.
type endpoint struct {
	conn *grpc.ClientConn
	rpc  paymentsv1.PaymentIntentServiceClient
	http *http.Client
	base string // http://host:port
	// timeout bounds each call: callTimeout, or durableCallTimeout on a
	// run whose claims are durable.
	timeout time.Duration
}

func dialEndpoint(grpcAddr, httpAddr string) (*endpoint, error) {
	// A restarted server must be found again at once, not after grpc-go's
	// default back-off of up to two minutes.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond,
			Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, err
	}
	return &endpoint{conn: conn, rpc: paymentsv1.NewPaymentIntentServiceClient(conn),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, base: "http://" + httpAddr,
		timeout: callTimeout}, nil
}

func (e *endpoint) close() {
	e.conn.Close()
	e.http.CloseIdleConnections()
}

// callTimeout bounds every call: longer than a healthy call takes, shorter
// than a pause, so that calls caught by one end with an unknown outcome.
const callTimeout = 2 * time.Second

// durableCallTimeout bounds every call of a run whose claims are durable:
// longer than the longest pause (lease + 1.5s), so that a client whose
// worker was paused past its lease and taken over hears what its worker
// answers after SIGCONT (ABORTED, IDEMPOTENCY_ATTEMPT_SUPERSEDED) instead
// of giving up first.
const durableCallTimeout = 4 * time.Second

func (e *endpoint) grpcContext(principal int, key string) (context.Context, context.CancelFunc) {
	kv := []string{"authorization", "Bearer " + tokens[principal]}
	if key != "" {
		kv = append(kv, wire.KeyHeader, key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...)), cancel
}

// do runs o (its input filled in) on e over o.Face and fills in its output.
func (e *endpoint) do(o *op) {
	if o.Face == "http" {
		e.doHTTP(o)
	} else {
		e.doGRPC(o)
	}
}

func (e *endpoint) doGRPC(o *op) {
	var header, trailer metadata.MD
	opts := []grpc.CallOption{grpc.Header(&header), grpc.Trailer(&trailer)}
	var pi *paymentsv1.PaymentIntent
	var err error
	switch o.Kind {
	case opCreate:
		ctx, cancel := e.grpcContext(o.Principal, o.Key)
		defer cancel()
		var resp *paymentsv1.CreatePaymentIntentResponse
		resp, err = e.rpc.CreatePaymentIntent(ctx, createRequest(o.Principal, keyIndex(o.Key), o.Body), opts...)
		pi = resp.GetPaymentIntent()
	case opGet:
		ctx, cancel := e.grpcContext(o.Principal, "")
		defer cancel()
		var resp *paymentsv1.GetPaymentIntentResponse
		resp, err = e.rpc.GetPaymentIntent(ctx, &paymentsv1.GetPaymentIntentRequest{Id: o.ID}, opts...)
		pi = resp.GetPaymentIntent()
	case opCancel:
		ctx, cancel := e.grpcContext(o.Principal, o.Key)
		defer cancel()
		var resp *paymentsv1.CancelPaymentIntentResponse
		resp, err = e.rpc.CancelPaymentIntent(ctx, &paymentsv1.CancelPaymentIntentRequest{Id: o.ID}, opts...)
		pi = resp.GetPaymentIntent()
	case opList:
		ctx, cancel := e.grpcContext(o.Principal, "")
		defer cancel()
		var resp *paymentsv1.ListPaymentIntentsResponse
		resp, err = e.rpc.ListPaymentIntents(ctx, &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000}, opts...)
		o.Intents, o.Partial = resp.GetPaymentIntents(), resp.GetNextPageToken() != ""
	}
	o.Replayed = len(header.Get(wire.ReplayedHeader)) > 0 || len(trailer.Get(wire.ReplayedHeader)) > 0
	if err != nil {
		st := status.Convert(err)
		o.Code, o.Err = st.Code(), err.Error()
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				o.Reason = info.Reason
			}
		}
		classify(o)
		return
	}
	o.Intent = pi
	o.Result = intentResult(pi)
}

// classify marks the errors whose outcome the client cannot know, and
// gives a stored error its result.
func classify(o *op) {
	switch o.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		// Internal and Unknown come from a connection cut mid-stream as
		// often as from anything: the call may have run.
		o.Unknown = true
	case codes.InvalidArgument:
		o.Result = "error " + o.Code.String()
	}
}

func intentResult(pi *paymentsv1.PaymentIntent) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
	if err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// httpErrors maps the HTTP face's `error` codes to gRPC's, with the
// ErrorInfo reason where the idempotency layer gave one.
var httpErrors = map[string]struct {
	code   codes.Code
	reason string
}{
	"idempotency_key_in_use":         {codes.Aborted, wire.ReasonKeyInUse},
	"idempotency_key_reused":         {codes.FailedPrecondition, wire.ReasonKeyReused},
	"idempotency_attempt_superseded": {codes.Aborted, wire.ReasonAttemptSuperseded},
	"idempotency_write_conflict":     {codes.Aborted, wire.ReasonWriteConflict},
	"idempotency_outcome_unknown":    {codes.Unavailable, wire.ReasonOutcomeUnknown},
	"unavailable":                    {codes.Unavailable, ""},
	"deadline_exceeded":              {codes.DeadlineExceeded, ""},
	"canceled":                       {codes.Canceled, ""},
	"invalid_argument":               {codes.InvalidArgument, ""},
	"not_found":                      {codes.NotFound, ""},
	"internal":                       {codes.Internal, ""},
	"unknown":                        {codes.Unknown, ""},
	"data_loss":                      {codes.DataLoss, ""},
	"aborted":                        {codes.Aborted, ""},
	"failed_precondition":            {codes.FailedPrecondition, ""},
}

func (e *endpoint) doHTTP(o *op) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var method, path string
	var body []byte
	switch o.Kind {
	case opCreate:
		method, path = http.MethodPost, "/v1/payment_intents"
		body, _ = protojson.Marshal(createRequest(o.Principal, keyIndex(o.Key), o.Body))
	case opGet:
		method, path = http.MethodGet, "/v1/payment_intents/"+o.ID
	case opCancel:
		// "{}" rather than no body: a request without one counts as
		// replayable, and would be sent again (see GetBody below).
		method, path, body = http.MethodPost, "/v1/payment_intents/"+o.ID+"/cancel", []byte("{}")
	case opList:
		method, path = http.MethodGet, "/v1/payment_intents?page_size=1000"
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	// Go's transport sends a request again on a new connection when the
	// one it reused breaks, if the request counts as idempotent, which
	// an Idempotency-Key header makes it: a create or cancel would then be
	// two requests recorded as one (the second refused as in flight, or
	// replayed). Without GetBody a body cannot be sent again, so each is
	// sent once; gets and lists may be sent twice, within their call.
	req.GetBody = nil
	req.Header.Set("Authorization", "Bearer "+tokens[o.Principal])
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if o.Key != "" {
		req.Header.Set("Idempotency-Key", o.Key)
	}
	resp, err := e.http.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		// No answer: the connection was cut, refused or timed out.
		o.Code, o.Err, o.Unknown = codes.Unavailable, err.Error(), true
		if errors.Is(err, context.DeadlineExceeded) {
			o.Code = codes.DeadlineExceeded
		}
		return
	}
	o.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if resp.StatusCode >= 300 {
		var p struct{ Error, Detail string }
		json.Unmarshal(b, &p)
		m, ok := httpErrors[p.Error]
		if !ok {
			m.code = codes.Unknown
		}
		o.Code, o.Reason, o.Err = m.code, m.reason, resp.Status+" "+strings.TrimSpace(string(b))
		classify(o)
		return
	}
	if o.Kind == opList {
		var l paymentsv1.ListPaymentIntentsResponse
		if err := protojson.Unmarshal(b, &l); err != nil {
			o.Code, o.Err = codes.Unknown, "list body: "+err.Error()
			return
		}
		o.Intents, o.Partial = l.PaymentIntents, l.NextPageToken != ""
		return
	}
	var pi paymentsv1.PaymentIntent
	if err := protojson.Unmarshal(b, &pi); err != nil {
		o.Code, o.Err = codes.Unknown, "intent body: "+err.Error()
		return
	}
	o.Intent = &pi
	o.Result = intentResult(&pi)
}

// keyIndex is the number in a key's name (keyName).
func keyIndex(key string) int {
	n := 0
	for _, c := range strings.TrimPrefix(key, "k") {
		n = n*10 + int(c-'0')
	}
	return n
}
