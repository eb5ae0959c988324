package main

import (
	"os"
	"strings"
	"testing"
)

// TestEncode_KeepsTheGeneratorsBytes: a document tidy leaves alone comes
// out byte for byte as it went in, so that the step changes only what it
// means to.
func TestEncode_KeepsTheGeneratorsBytes(t *testing.T) {
	for _, in := range []string{
		"{\n  \"b\": [],\n  \"a\": {\n    \"x\": \"\\u003ct\\u003e\",\n    \"n\": [\n      1.5,\n      true,\n      null\n    ],\n    \"e\": {}\n  }\n}\n",
	} {
		doc, err := parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(doc.encode()); got != in {
			t.Errorf("encode(parse(in)):\n%s\nwant:\n%s", got, in)
		}
	}
}

func TestTidy_DropsUnusedDefinitionsAndMakesEmptyBodiesOptional(t *testing.T) {
	doc, err := parse([]byte(`{"paths":{"/a/{id}":{"post":{"parameters":[
		{"name":"body","in":"body","required":true,"schema":{"$ref":"#/definitions/Empty"}},
		{"name":"full","in":"body","required":true,"schema":{"$ref":"#/definitions/Full"}}],
		"responses":{"200":{"schema":{"$ref":"#/definitions/Out"}}}}}},
		"definitions":{"Empty":{"type":"object"},"Full":{"properties":{"x":{"type":"string"}}},
		"Out":{"properties":{"in":{"$ref":"#/definitions/Inner"}}},"Inner":{},"Wrapper":{"properties":{"o":{"$ref":"#/definitions/Out"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tidy(doc)
	var defs []string
	for _, m := range doc.get("definitions").members() {
		defs = append(defs, m.key)
	}
	if got, want := strings.Join(defs, ","), "Empty,Full,Out,Inner"; got != want {
		t.Errorf("definitions %s, want %s (Wrapper unused)", got, want)
	}
	params := doc.get("paths").get("/a/{id}").get("post").get("parameters").elems()
	if got := string(params[0].get("required").value); got != "false" {
		t.Errorf("empty body required: %s, want false", got)
	}
	if got := string(params[1].get("required").value); got != "true" {
		t.Errorf("body with properties required: %s, want true", got)
	}
}

// TestEncode_GeneratedDocumentRoundTrips: the committed document, already
// tidied, is a fixed point, its version the VERSION file's.
func TestEncode_GeneratedDocumentRoundTrips(t *testing.T) {
	in, err := os.ReadFile("../../gen/payments/v1/payments.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parse(in)
	if err != nil {
		t.Fatal(err)
	}
	tidy(doc)
	version, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if err := setVersion(doc, strings.TrimSpace(string(version))); err != nil {
		t.Fatal(err)
	}
	if got := doc.encode(); string(got) != string(in) {
		t.Errorf("tidy changed the committed document: run make generate")
	}
}

// TestSetVersion_InThePlaceholdersPlace: the release replaces the
// generator's placeholder where it stood, and a document without an info
// object is refused rather than given one.
func TestSetVersion_InThePlaceholdersPlace(t *testing.T) {
	doc, err := parse([]byte("{\n  \"info\": {\n    \"title\": \"t\",\n    \"version\": \"version not set\",\n    \"license\": {}\n  }\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := setVersion(doc, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"info\": {\n    \"title\": \"t\",\n    \"version\": \"v1.2.3\",\n    \"license\": {}\n  }\n}\n"
	if got := string(doc.encode()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for _, in := range []string{`{}`, `{"info":"x"}`} {
		doc, _ := parse([]byte(in))
		if err := setVersion(doc, "v1.2.3"); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

// TestTidy_DeclaresTheEchoedKeyOnEveryAnswer: each response of an
// operation that takes Idempotency-Key declares it, in order among the
// headers it has, once; an operation without the parameter is left alone.
func TestTidy_DeclaresTheEchoedKeyOnEveryAnswer(t *testing.T) {
	doc, err := parse([]byte(`{"paths":{"/a":{
		"post":{"parameters":[{"name":"Idempotency-Key","in":"header"}],"responses":{
			"200":{"headers":{"Idempotency-Expires-At":{},"Location":{}}},
			"400":{},
			"409":{"headers":{"Idempotency-Key":{"type":"string"}}}}},
		"get":{"parameters":[{"name":"Idempotency-Key","in":"query"}],"responses":{"200":{}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tidy(doc)
	headers := func(method, code string) string {
		var names []string
		for _, m := range doc.get("paths").get("/a").get(method).get("responses").get(code).get("headers").members() {
			names = append(names, m.key)
		}
		return strings.Join(names, ",")
	}
	for _, c := range []struct{ method, code, want string }{
		{"post", "200", "Idempotency-Expires-At,Idempotency-Key,Location"},
		{"post", "400", "Idempotency-Key"},
		{"post", "409", "Idempotency-Key"},
		{"get", "200", ""},
	} {
		if got := headers(c.method, c.code); got != c.want {
			t.Errorf("%s %s headers %s, want %s", c.method, c.code, got, c.want)
		}
	}
	if got := doc.get("paths").get("/a").get("post").get("responses").get("409").get("headers").get("Idempotency-Key").get("type").str(); got != "string" {
		t.Errorf("a declared Idempotency-Key was replaced: type %q", got)
	}
}
