// Command openapitidy finishes, in place, the OpenAPI 2.0 document that
// protoc-gen-openapiv2 writes. It does what no option of the generator can
// say. It drops the definitions that no operation refers to, such as the
// response wrappers that response_body unwraps. It makes a body optional
// where it has no properties and the path holds the whole request, as for
// a cancel's empty body. It declares the Idempotency-Key header on every
// answer of an operation that takes one. The server echoes it, errors
// included. It sets info.version to the release given by -version, the
// VERSION file's. The protos cannot know it. It runs from make generate.
// The order of the generator's keys is kept, so gen/ diffs stay readable.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	fs := flag.NewFlagSet("openapitidy", flag.ExitOnError)
	version := fs.String("version", "", "the release, set as info.version (make generate gives the VERSION file's)")
	fs.Parse(os.Args[1:])
	if fs.NArg() != 1 || *version == "" {
		fmt.Fprintln(os.Stderr, "usage: openapitidy -version V FILE.swagger.json")
		os.Exit(2)
	}
	if err := tidyFile(fs.Arg(0), *version); err != nil {
		fmt.Fprintln(os.Stderr, "openapitidy:", err)
		os.Exit(1)
	}
}

func tidyFile(name, version string) error {
	in, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	doc, err := parse(in)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	tidy(doc)
	if err := setVersion(doc, version); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.WriteFile(name, doc.encode(), 0o644)
}

// setVersion makes info.version the release. It keeps the place the
// generator gave its placeholder, "version not set". So the document names
// the build that serves it.
func setVersion(doc *node, version string) error {
	info := doc.get("info")
	if info == nil || info.kind != '{' {
		return errors.New("no info object")
	}
	v, _ := json.Marshal(version)
	info.set("version", scalar(string(v)))
	return nil
}

// tidy makes the document say what the server does.
func tidy(doc *node) {
	defs := doc.get("definitions")
	optionalEmptyBodies(doc.get("paths"), defs)
	echoedKeys(doc.get("paths"))
	dropUnused(doc, defs)
}

// keyHeader is the request header the server echoes on its answer.
const keyHeader = "Idempotency-Key"

// echoedKeys declares keyHeader on each response of each operation that
// takes it as a header parameter. The generator copies the file-level
// responses without headers. And options cannot name one header for every
// response of a method. The headers stay in the generator's order, by name.
func echoedKeys(paths *node) {
	echo := `{"description": "The request's Idempotency-Key, exactly as it was sent.", "type": "string"}`
	for _, path := range paths.members() {
		for _, op := range path.val.members() {
			if !takesHeader(op.val, keyHeader) {
				continue
			}
			for _, resp := range op.val.get("responses").members() {
				headers := resp.val.get("headers")
				if headers == nil {
					headers = &node{kind: '{'}
					resp.val.set("headers", headers)
				}
				if headers.get(keyHeader) != nil {
					continue
				}
				h, _ := parse([]byte(echo))
				headers.insertSorted(keyHeader, h)
			}
		}
	}
}

// takesHeader reports whether op has the header parameter name.
func takesHeader(op *node, name string) bool {
	for _, p := range op.get("parameters").elems() {
		if p.get("in").str() == "header" && p.get("name").str() == name {
			return true
		}
	}
	return false
}

// optionalEmptyBodies marks not required each body parameter whose schema
// has no properties. The server takes such a request without a body.
func optionalEmptyBodies(paths, defs *node) {
	for _, path := range paths.members() {
		for _, op := range path.val.members() {
			for _, p := range op.val.get("parameters").elems() {
				if p.get("in").str() != "body" {
					continue
				}
				schema := p.get("schema")
				if ref := schema.get("$ref").str(); ref != "" {
					schema = defs.get(defName(ref))
				}
				if len(schema.get("properties").members()) == 0 {
					p.set("required", scalar("false"))
				}
			}
		}
	}
}

// dropUnused removes the definitions that nothing outside definitions
// refers to, directly or through other definitions.
func dropUnused(doc, defs *node) {
	used := map[string]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		for _, m := range n.members() {
			if m.key == "$ref" {
				name := defName(m.val.str())
				if !used[name] {
					used[name] = true
					visit(defs.get(name))
				}
				continue
			}
			visit(m.val)
		}
		for _, e := range n.elems() {
			visit(e)
		}
	}
	for _, m := range doc.members() {
		if m.key != "definitions" {
			visit(m.val)
		}
	}
	defs.keep(func(key string) bool { return used[key] })
}

// defName is the definition a local $ref names.
func defName(ref string) string {
	const prefix = "#/definitions/"
	if len(ref) > len(prefix) && ref[:len(prefix)] == prefix {
		return ref[len(prefix):]
	}
	return ""
}
