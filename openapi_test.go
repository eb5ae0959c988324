package paymentsd_test

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
)

// TestOpenAPI_IsValidSwagger2 validates the served document against the
// OpenAPI 2.0 schema and its rules (unique operation ids, resolvable refs,
// path parameters declared), as a client generator would read it.
func TestOpenAPI_IsValidSwagger2(t *testing.T) {
	doc, err := loads.Analyzed(json.RawMessage(paymentsd.OpenAPI), "2.0")
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
// problem+json; nothing the server answers itself is left to a validating
// proxy (a create without Idempotency-Key gets the server's own 400), and
// the cancel's empty body is optional.
func TestOpenAPI_SaysWhatTheServerDoes(t *testing.T) {
	var doc struct {
		Produces []string
		Paths    map[string]map[string]struct {
			Parameters []struct {
				Name, In string
				Required bool
			}
			Responses map[string]struct {
				Headers map[string]any
			}
		}
	}
	if err := json.Unmarshal(paymentsd.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(doc.Produces, "application/problem+json") {
		t.Errorf("produces %v, want application/problem+json among them", doc.Produces)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for code, header := range map[string]string{"401": "Www-Authenticate", "503": "Retry-After"} {
				if _, ok := op.Responses[code].Headers[header]; !ok {
					t.Errorf("%s %s: %s without %s", method, path, code, header)
				}
			}
			for _, p := range op.Parameters {
				if p.Required && p.In != "path" && !(p.In == "body" && path == "/v1/payment_intents") {
					t.Errorf("%s %s: %s %s required; the server answers its absence itself", method, path, p.In, p.Name)
				}
			}
		}
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
	if err := json.Unmarshal(paymentsd.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(paymentsd.VersionFile); doc.Info.Version != want {
		t.Errorf("info.version %q, VERSION %q: run make generate", doc.Info.Version, want)
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(license), "Apache License\n                           Version 2.0") ||
		doc.Info.License.Name != "Apache-2.0" || doc.Info.License.URL != "https://www.apache.org/licenses/LICENSE-2.0" {
		t.Errorf("info.license %+v; LICENSE is Apache-2.0", doc.Info.License)
	}
}
