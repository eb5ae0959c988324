package daemon_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNOTICE_PassesOnTheNoticesOfWhatTheBinaryIncludes: every module
// linked into paymentsd that ships a NOTICE file (Apache-2.0 section 4(d)
// asks for it to be passed on) has its section in NOTICE, and NOTICE has
// no section of a module the binary no longer includes.
func TestNOTICE_PassesOnTheNoticesOfWhatTheBinaryIncludes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Dir}}{{end}}", "./cmd/paymentsd").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var want []string
	for line := range strings.Lines(string(out)) {
		path, dir, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(path, "github.com/paymentsd/paymentsd") || slices.Contains(want, path) {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(strings.ToUpper(e.Name()), "NOTICE") {
				want = append(want, path)
			}
		}
	}
	notice, err := os.ReadFile("../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	// A section starts with a rule, then the module's path alone on a line.
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^-{20,}\n(\S+)\n`).FindAllStringSubmatch(string(notice), -1) {
		got = append(got, m[1])
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("NOTICE has sections for %q; the modules in the binary with a NOTICE file are %q", got, want)
	}
}
