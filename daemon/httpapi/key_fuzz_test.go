package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/wire"
)

// keySink is a service that keeps the idempotency keys of the last call,
// as gRPC delivered them.
type keySink struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	mu   sync.Mutex
	keys []string
}

func (s *keySink) CreatePaymentIntent(ctx context.Context, _ *paymentsv1.CreatePaymentIntentRequest) (*paymentsv1.CreatePaymentIntentResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.keys = md.Get(wire.KeyHeader)
	s.mu.Unlock()
	return &paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: "pi_1"}}, nil
}

// sfString is key as an RFC 8941 string.
func sfString(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

// FuzzIdempotencyKeyHeader sends Idempotency-Key lines through the whole
// face, to a gRPC server in memory: each call is refused as an invalid key,
// or reaches the server with one key per line, each valid by the wire rule
// and named by its line, bare or as a string. A bare valid key with no
// comma is never refused, and two lines merged into one, as a proxy may, are
// always refused: a merge must not name a third key.
func FuzzIdempotencyKeyHeader(f *testing.F) {
	for _, seed := range [][2]string{
		{"order-1001", ""}, {`"order-1001"`, ""}, {`"say \"hi\""`, "k2"}, {`"back\\slash"`, ""},
		{"a,b", ""}, {`"a,b"`, ""}, {`"a`, `b"`}, {`"a", "b"`, ""}, {`a"b`, `"`}, {"", ""},
		{" k", "k "}, {`"a\b"`, ""}, {"caf\xc3\xa9", ""}, {"tab\t", ""}, {`""`, ""}, {`"k";p=1`, ""},
	} {
		f.Add(seed[0], seed[1], seed[1] != "")
	}
	sink := &keySink{}
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, sink)
	conn := httpapi.Dial(srv)
	f.Cleanup(func() { srv.Stop(); conn.Close() })
	h := httpapi.New(conn, auth.NewAuthenticator(auth.FromBearer, auth.Dev()))
	f.Fuzz(func(t *testing.T, v1, v2 string, two bool) {
		lines := []string{v1}
		if two {
			lines = append(lines, v2)
			if send(t, h, sink, v1+", "+v2) != nil {
				t.Fatalf("lines %q merged into one were not refused", lines)
			}
		}
		keys := send(t, h, sink, lines...)
		if keys == nil {
			if bareKey(v1) && !two {
				t.Fatalf("bare key %q, valid and with no comma, refused", v1)
			}
			return
		}
		if len(keys) != len(lines) {
			t.Fatalf("lines %q reached the server as keys %q", lines, keys)
		}
		for i, k := range keys {
			if err := wire.ValidateKey(k); err != nil || strings.Contains(k, ",") {
				t.Fatalf("line %q reached the server as key %q (%v)", lines[i], k, err)
			}
			if lines[i] != k && lines[i] != sfString(k) {
				t.Fatalf("line %q reached the server as key %q, which it does not name", lines[i], k)
			}
		}
	})
}

// bareKey reports whether v is a key the face must take as it is.
func bareKey(v string) bool {
	return wire.ValidateKey(v) == nil && !strings.ContainsAny(v, `,`) && !strings.HasPrefix(v, `"`)
}

// send creates an intent with one Idempotency-Key line per value, and
// returns the keys the server got, or nil when the face refused the key.
func send(t *testing.T, h http.Handler, sink *keySink, vals ...string) []string {
	t.Helper()
	sink.mu.Lock()
	sink.keys = nil
	sink.mu.Unlock()
	req := httptest.NewRequest("POST", "/v1/payment_intents", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header[http.CanonicalHeaderKey("Idempotency-Key")] = vals
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code == http.StatusCreated {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return append([]string{}, sink.keys...)
	}
	var p struct{ Error string }
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusBadRequest || p.Error != "idempotency_key_invalid" {
		t.Fatalf("keys %q: %d %s %s; want 201, or 400 idempotency_key_invalid as problem+json", vals, w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	return nil
}
