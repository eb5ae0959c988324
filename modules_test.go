package paymentsd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestModules_AnEmbedderGetsLittle builds an outside module, as a team
// that embeds the library would, and counts the modules its build
// depends on (go list -m all): each is a minimum version imposed on that
// team's build. grpc-go and bbolt alone bring 51 here.
func TestModules_AnEmbedderGetsLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a module of its own")
	}
	top, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		imports []string
		max     int
	}{
		{"interceptor and bbolt", []string{"interceptor", "boltstore"}, 60},
		{"interceptor and PostgreSQL", []string{"interceptor", "pgstore"}, 60},
		{"once and bbolt", []string{"once", "boltstore"}, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var src strings.Builder
			src.WriteString("package main\n\nimport (\n")
			for _, p := range tc.imports {
				src.WriteString("\t_ \"github.com/paymentsd/paymentsd/" + p + "\"\n")
			}
			src.WriteString(")\n\nfunc main() {}\n")
			write(t, filepath.Join(dir, "main.go"), src.String())
			write(t, filepath.Join(dir, "go.mod"), "module example.com/embedder\n\ngo 1.26.0\n\n"+
				"require github.com/paymentsd/paymentsd v0.0.0\n\nreplace github.com/paymentsd/paymentsd => "+top+"\n")
			goIn(t, dir, "mod", "tidy")
			goIn(t, dir, "build", "-o", os.DevNull, ".")
			mods := strings.Fields(goIn(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
			t.Logf("%d modules: %s", len(mods), strings.Join(mods, " "))
			if len(mods) > tc.max {
				t.Errorf("an embedder importing %v depends on %d modules, over %d: keep what only the daemon needs out of the library's go.mod (docs/layout.md, Modules)", tc.imports, len(mods), tc.max)
			}
		})
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goIn runs the go command in dir, outside any workspace, and returns its
// output.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
