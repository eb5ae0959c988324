package daemon_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-openapi/loads"
	"github.com/go-openapi/strfmt"
	"github.com/go-openapi/validate"

	"github.com/paymentsd/paymentsd"
	"github.com/paymentsd/paymentsd/daemon"
)

// TestOpenAPI_IsValidSwagger2 validates the served document against the
// OpenAPI 2.0 schema and its rules (unique operation ids, resolvable refs,
// path parameters declared), as a client generator would read it.
func TestOpenAPI_IsValidSwagger2(t *testing.T) {
	doc, err := loads.Analyzed(json.RawMessage(daemon.OpenAPI), "2.0")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := validate.Spec(doc, strfmt.Default); err != nil {
		t.Errorf("the OpenAPI document is not valid Swagger 2.0: %v", err)
	}
	// Spec drops the warnings, unused definitions among them: the
	// validator itself keeps them with its errors.
	errs, warnings := validate.NewSpecValidator(doc.Schema(), strfmt.Default).Validate(doc)
	for _, w := range append(errs.Warnings, warnings.Warnings...) {
		t.Errorf("warning: %v", w)
	}
}

// TestOpenAPI_SaysWhatTheServerDoes: every operation needs a credential
// and declares its 401 and 503 with their headers; errors are
// problem+json; create requires Idempotency-Key and declares the 400 of
// its absence, but nothing else the server answers itself is left to a
// validating proxy; every answer of an operation that takes the key
// declares it echoed; and the cancel's empty body is optional.
func TestOpenAPI_SaysWhatTheServerDoes(t *testing.T) {
	var doc struct {
		Produces []string
		Paths    map[string]map[string]struct {
			Parameters []struct {
				Name, In string
				Required bool
			}
			Responses map[string]struct {
				Description string
				Headers     map[string]any
			}
		}
	}
	if err := json.Unmarshal(daemon.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(doc.Produces, "application/problem+json") {
		t.Errorf("produces %v, want application/problem+json among them", doc.Produces)
	}
	const create = "post /v1/payment_intents"
	keyed := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for code, header := range map[string]string{"401": "Www-Authenticate", "503": "Retry-After"} {
				if _, ok := op.Responses[code].Headers[header]; !ok {
					t.Errorf("%s %s: %s without %s", method, path, code, header)
				}
			}
			name := method + " " + path
			for _, p := range op.Parameters {
				if p.In == "header" && p.Name == "Idempotency-Key" {
					keyed[name] = true
					if p.Required != (name == create) {
						t.Errorf("%s: Idempotency-Key required %v; the server requires it on create alone", name, p.Required)
					}
					continue
				}
				if p.Required && p.In != "path" && !(p.In == "body" && name == create) {
					t.Errorf("%s: %s %s required; the server answers its absence itself", name, p.In, p.Name)
				}
			}
			if !keyed[name] {
				continue
			}
			for code, r := range op.Responses {
				if _, ok := r.Headers["Idempotency-Key"]; !ok {
					t.Errorf("%s: %s does not declare the Idempotency-Key the server echoes", name, code)
				}
			}
		}
	}
	if len(keyed) != 2 {
		t.Errorf("operations taking Idempotency-Key: %v, want create and cancel", keyed)
	}
	if d := doc.Paths["/v1/payment_intents"]["post"].Responses["400"].Description; !strings.Contains(d, "idempotency_key_missing: no Idempotency-Key header") {
		t.Errorf("create's 400 does not declare the missing key: %q", d)
	}
}

// TestOpenAPI_InfoIsTheRelease: info.version is the VERSION file's release
// (make generate sets it) and info.license the LICENSE's, so that a client
// generated from the document names what it was generated from.
func TestOpenAPI_InfoIsTheRelease(t *testing.T) {
	var doc struct {
		Info struct {
			Version string
			License struct{ Name, URL string }
		}
	}
	if err := json.Unmarshal(daemon.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(paymentsd.VersionFile); doc.Info.Version != want {
		t.Errorf("info.version %q, VERSION %q: run make generate", doc.Info.Version, want)
	}
	license, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(license), "Apache License\n                           Version 2.0") ||
		doc.Info.License.Name != "Apache-2.0" || doc.Info.License.URL != "https://www.apache.org/licenses/LICENSE-2.0" {
		t.Errorf("info.license %+v; LICENSE is Apache-2.0", doc.Info.License)
	}
}
