package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// A create over gRPC and one over HTTP each leave their idempotency key
// with the intent: the console's intent lookup by id answers it, with the
// principal, on bbolt and on PostgreSQL.
func TestConsole_IntentByID_NamesTheKeyThatCreatedIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   func(t *testing.T) string
	}{
		{"bbolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), "paymentsd.db") }},
		{"postgres", postgresURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, console := startConsole(t, "", spec{db: tc.db(t), http: true})

			a := d.createSeed("tok-grpc", "order-grpc-1", "100000000")
			if a.err != nil {
				t.Fatalf("create over gRPC: %v", a.err)
			}
			grpcID := a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
			h := d.httpCreate(t, "tok-http", "order-http-1", seedBody)
			if h.status != http.StatusCreated {
				t.Fatalf("create over HTTP: %d %s", h.status, h.body)
			}
			httpID, _ := h.intent(t)["id"].(string)

			for _, want := range []struct{ id, principal, key string }{
				{grpcID, devPrincipal("tok-grpc"), "order-grpc-1"},
				{httpID, devPrincipal("tok-http"), "order-http-1"},
			} {
				got := httpCall(t, "GET", console+"/api/v1/intent?id="+want.id, "", bearerHeader(consoleToken)...)
				var answer struct {
					Found     bool    `json:"found"`
					Principal string  `json:"principal"`
					Key       *string `json:"key"`
				}
				if err := json.Unmarshal(got.body, &answer); err != nil {
					t.Fatalf("intent %s: %d %s: %v", want.id, got.status, got.body, err)
				}
				if got.status != http.StatusOK || !answer.Found || answer.Principal != want.principal || answer.Key == nil || *answer.Key != want.key {
					t.Errorf("intent %s by its id: %d %s; want principal %s and key %q", want.id, got.status, got.body, want.principal, want.key)
				}
			}
		})
	}
}
