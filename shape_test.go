package paymentsd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of production code may span,
// from its func line to its closing brace. A longer one does several
// things: give each a name.
const maxFuncLines = 60

// maxProgramLines is the most lines the daemon's main package may hold
// outside its tests. It wires flags to packages; what grows past that
// belongs in a package of its own.
const maxProgramLines = 900

// generated marks a file written by a tool, which the shape tests leave
// alone: https://go.dev/s/generatedcode.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// productionFiles returns the Go files of every module that are not
// tests and not generated, with their parsed syntax.
func productionFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	return goFiles(t, false)
}

// testFiles returns the _test.go files of every module, with their parsed
// syntax.
func testFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	return goFiles(t, true)
}

// goFiles returns the Go files of every module that are not generated:
// the tests when tests is true, else the rest.
func goFiles(t *testing.T, tests bool) map[string]*ast.File {
	t.Helper()
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case p != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", p == "tools", p == "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") != tests {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if generated.Match(src) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[p] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("found no Go file")
	}
	positions = fset
	return files
}

// positions is the file set of the files goFiles parsed last.
var positions *token.FileSet

// TestShape_NoFunctionOver60Lines: no function or method of production
// code, in any module, spans more than maxFuncLines lines.
func TestShape_NoFunctionOver60Lines(t *testing.T) {
	for path, f := range productionFiles(t) {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			from, to := positions.Position(fn.Pos()), positions.Position(fn.End())
			if n := to.Line - from.Line + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d: split what it does into functions with names", path, from.Line, fn.Name.Name, n, maxFuncLines)
			}
		}
	}
}

// TestShape_ProgramStaysWiring: daemon/cmd/paymentsd holds at most
// maxProgramLines lines outside its tests.
func TestShape_ProgramStaysWiring(t *testing.T) {
	const dir = "daemon/cmd/paymentsd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(src), "\n")
	}
	if lines == 0 || lines > maxProgramLines {
		t.Errorf("%s holds %d lines outside its tests, want 1 to %d: move what is not wiring flags to packages into a package of daemon/", dir, lines, maxProgramLines)
	}
}

// Test files are read more often than they are written. A test past these
// bounds does several things: a table of rows, or steps with names, says
// what each one is.
const (
	maxTestFileLines = 600
	maxTestFuncLines = 80
)

// drivers are the test functions allowed past maxTestFuncLines: each runs
// a whole schedule of faults against real processes and checks it, step
// by step in order, and reads best as one piece.
var drivers = map[string]string{
	"daemon/cmd/paymentsd:TestCrash_KillNineNeverDuplicatesOrLoses": "kill -9 rounds",
	"daemon/cmd/paymentsd:TestCrash_Replicas_PostgreSQL":            "replicas killed under load",
	"daemon/cmd/paymentsd:runFailover":                              "a PostgreSQL failover's rounds",
	"daemon/robustness:do":                                          "one robustness run",
	"daemon/robustness:inject":                                      "the robustness faults",
	"daemon/robustness:injectPatroni":                               "the robustness faults under Patroni",
	"daemon/robustness:msgRun":                                      "one message run",
	"daemon/robustness:checkMessages":                               "a message run's verdict",
}

// TestShape_TestFiles: no test file over maxTestFileLines lines, and no
// function of one over maxTestFuncLines, drivers aside.
func TestShape_TestFiles(t *testing.T) {
	for path, f := range testFiles(t) {
		if end := positions.Position(f.FileEnd).Line; end > maxTestFileLines {
			t.Errorf("%s: %d lines, over %d: split it by the behaviour its tests check", path, end, maxTestFileLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || drivers[filepath.Dir(path)+":"+fn.Name.Name] != "" {
				continue
			}
			from, to := positions.Position(fn.Pos()), positions.Position(fn.End())
			if n := to.Line - from.Line + 1; n > maxTestFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d: make its cases rows of a table, or its steps functions with names", path, from.Line, fn.Name.Name, n, maxTestFuncLines)
			}
		}
	}
}
