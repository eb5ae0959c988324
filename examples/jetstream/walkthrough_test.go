package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The walkthrough is docs/jetstream.md's section "Trying it". Its sh blocks
// run in order, as a reader pastes them. Its text blocks are what they
// print: the output must end with them.
const (
	walkthroughDoc     = "../../docs/jetstream.md"
	walkthroughSection = "## Trying it"
)

// TestWalkthrough_RunsAsWritten runs the walkthrough in one bash, from a
// copy of the repository's root made of symbolic links, so that what it
// builds and writes stays in the test's directory. Its temporary directory
// is the test's too. Intent ids and times differ from run to run: they
// are compared by their order of appearance, so the replay must repeat
// the first reply's.
func TestWalkthrough_RunsAsWritten(t *testing.T) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server not found and CI=true: apt-get install nats-server (%v)", err)
		}
		t.Skipf("nats-server not found: apt-get install nats-server (%v)", err)
	}
	doc, err := os.ReadFile(walkthroughDoc)
	if err != nil {
		t.Fatal(err)
	}
	script, want := walkthrough(t, string(doc))

	dir := t.TempDir()
	clone, tmp := filepath.Join(dir, "clone"), filepath.Join(dir, "tmp")
	mirrorRepository(t, "../..", clone)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a cold build cache is slow
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-eu", "-o", "pipefail", "-c", script)
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout = out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// Its own process group: the broker and the consumer it starts in the
	// background are in it, and die with it whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	runErr := cmd.Wait()
	got, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("the walkthrough failed: %v\nstdout:\n%s\nstderr:\n%s\n%s", runErr, got, stderr.String(), logsUnder(tmp))
	}
	if g, w := normalize(string(got)), normalize(want); !strings.HasSuffix(g, w) {
		t.Errorf("the walkthrough's output does not end with what docs/jetstream.md shows.\ngot:\n%s\nwant it to end with:\n%s\n%s", got, want, logsUnder(tmp))
	}
}

var fenceLine = regexp.MustCompile("^```([a-z]*)\\s*$")

// walkthrough returns the section's sh blocks, joined, and its text
// blocks, joined. It fails when the section has none of either.
func walkthrough(t *testing.T, doc string) (script, output string) {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n"+walkthroughSection+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", walkthroughDoc, walkthroughSection)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var sh, text strings.Builder
	var into *strings.Builder
	inFence := false
	for _, line := range strings.Split(section, "\n") {
		m := fenceLine.FindStringSubmatch(line)
		switch {
		case m != nil && !inFence:
			inFence = true
			into = map[string]*strings.Builder{"sh": &sh, "text": &text}[m[1]]
		case line == "```" && inFence:
			inFence, into = false, nil
		case into != nil:
			into.WriteString(line + "\n")
		}
	}
	if sh.Len() == 0 || text.Len() == 0 {
		t.Fatalf("%s: section %q needs sh blocks and text blocks of their output", walkthroughDoc, walkthroughSection)
	}
	return sh.String(), text.String()
}

// mirrorRepository makes dst a copy of the repository at root, each entry
// a symbolic link, as a fresh clone would be: bin/ and data/, which a
// clone lacks and the walkthrough may write, are left out.
func mirrorRepository(t *testing.T, root, dst string) {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != "bin" && n != "data" && !strings.HasPrefix(n, ".") {
			if err := os.Symlink(filepath.Join(abs, n), filepath.Join(dst, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var (
	intentID  = regexp.MustCompile(`pi_[0-9a-f]{24}`)
	timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
)

// normalize names each distinct intent id and time by its order of first
// appearance, from the end of the output, so that a run's own values
// compare equal to the doc's when they repeat alike.
func normalize(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	seen := map[string]string{}
	for i := len(lines) - 1; i >= 0; i-- {
		for _, re := range []*regexp.Regexp{intentID, timestamp} {
			lines[i] = re.ReplaceAllStringFunc(lines[i], func(v string) string {
				if _, ok := seen[v]; !ok {
					seen[v] = "<" + strings.Repeat("#", len(seen)+1) + ">"
				}
				return seen[v]
			})
		}
	}
	return strings.Join(lines, "\n")
}

// logsUnder returns the .log files under dir, for a failure's message.
func logsUnder(dir string) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".log") {
			data, _ := os.ReadFile(p)
			b.WriteString("--- " + p + "\n" + string(data))
		}
		return nil
	})
	return b.String()
}
