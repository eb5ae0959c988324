package paymentsd_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go code of these pages is compiled, so it cannot rot. Each ```go
// block of the section (every section for "") must be, byte for byte,
// either the body of an Example function of the files, up to its
// "// Output:" comment, or a run of their top-level declarations with
// their doc comments. go test runs the examples and checks their output;
// the files of a program are built and run by its tests. Every ```go
// block of README.md and docs/ must be in an entry.
var compiledDocs = []struct {
	page, section string
	files         string // globs, separated by spaces
}{
	{"docs/embedding.md", "embedding-the-interceptor", "interceptor/example*_test.go pgstore/example_test.go"},
	{"docs/embedding.md", "without-grpc-a-message-consumer", "once/example_test.go"},
	{"docs/embedding.md", "the-client-half", "daemon/server/example_test.go"},
	{"docs/embedding.md", "another-store", "memstore/memstore_test.go"},
	{"docs/idempotency.md", "", "interceptor/examples_more_test.go"},
	{"docs/jetstream.md", "", "examples/jetstream/*.go"},
}

// TestDocs_GoCodeIsCompiled checks each page of compiledDocs against its
// Go files, and that no Go block of the docs is left out of compiledDocs.
func TestDocs_GoCodeIsCompiled(t *testing.T) {
	checked := map[string]bool{} // "page:line" of each block checked
	for _, d := range compiledDocs {
		src, err := os.ReadFile(d.page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := fencedBlocks(string(src), d.section, "go")
		if len(blocks) == 0 {
			t.Errorf("%s#%s has no Go code block: fix compiledDocs", d.page, d.section)
		}
		var files []string
		for _, g := range strings.Fields(d.files) {
			m, err := filepath.Glob(g)
			if err != nil || len(m) == 0 {
				t.Fatalf("%s: no files (%v)", g, err)
			}
			files = append(files, m...)
		}
		known := map[string]bool{}
		for _, f := range files {
			for _, s := range compiledTexts(t, f) {
				known[s] = true
			}
		}
		for _, b := range blocks {
			checked[fmt.Sprintf("%s:%d", d.page, b.line)] = true
			if !known[strings.TrimSpace(b.text)] {
				t.Errorf("%s:%d: this Go block is neither an Example's body nor declarations of %s; make it one, word for word:\n%s",
					d.page, b.line, d.files, b.text)
			}
		}
	}
	for p := range docsPages(t) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range fencedBlocks(string(src), "", "go") {
			if !checked[fmt.Sprintf("%s:%d", p, b.line)] {
				t.Errorf("%s:%d: this Go block is in no entry of compiledDocs: add one, or fence it as another language if it is not Go", p, b.line)
			}
		}
	}
}

type fenced struct {
	line int // of the opening fence
	text string
}

var fenceRE = regexp.MustCompile("^(```+)([a-z]*)\\s*$")

// fencedBlocks returns the code blocks of language lang in the section of
// anchor section (the whole page for ""), up to the next heading of its
// level or above.
func fencedBlocks(src, section, lang string) []fenced {
	var out []fenced
	in := section == ""
	level := 0
	var cur *fenced
	fence := ""
	for i, line := range strings.Split(src, "\n") {
		if fence != "" {
			if strings.TrimSpace(line) == fence {
				if cur != nil {
					out = append(out, *cur)
				}
				fence, cur = "", nil
			} else if cur != nil {
				cur.text += line + "\n"
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			if in && m[2] == lang {
				cur = &fenced{line: i + 1}
			}
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil && section != "" {
			switch {
			case anchor(m[2]) == section:
				in, level = true, len(m[1])
			case in && len(m[1]) <= level:
				in = false
			}
		}
	}
	return out
}

// compiledTexts returns what a doc's Go block may be, from one Go file:
// the body of each Example function up to its output comment, one tab
// less indented, and each run of consecutive top-level declarations, with
// their doc comments.
func compiledTexts(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	var out []string
	for i, d := range f.Decls {
		for _, e := range f.Decls[i:] {
			out = append(out, strings.TrimSpace(string(src[off(declStart(d)):off(e.End())])))
		}
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
			continue
		}
		body := string(src[off(fn.Body.Lbrace)+1 : off(fn.Body.Rbrace)])
		if k := strings.Index(body, "\t// Output:"); k >= 0 {
			body = body[:k]
		}
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		out = append(out, strings.TrimSpace(strings.Join(lines, "\n")))
	}
	return out
}

// declStart is where a declaration begins, its doc comment included.
func declStart(d ast.Decl) token.Pos {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Doc != nil {
			return d.Doc.Pos()
		}
	case *ast.GenDecl:
		if d.Doc != nil {
			return d.Doc.Pos()
		}
	}
	return d.Pos()
}
