package robustness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// outDir is where a failing run's report goes: PAYMENTSD_ROBUSTNESS_OUT;
// under CI, the repository's bin/robustness (ignored by git, kept by
// CI); otherwise a new temporary directory, which outlives the test
// (t.TempDir would be removed when the test ends).
func outDir(t *testing.T) string {
	if d := os.Getenv("PAYMENTSD_ROBUSTNESS_OUT"); d != "" {
		return d
	}
	if os.Getenv("CI") == "true" {
		if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
			return filepath.Join(strings.TrimSpace(string(top)), "bin", "robustness")
		}
	}
	d, err := os.MkdirTemp("", "paymentsd-robustness-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// report writes a failing run's report and returns its directory: the
// violations, the fault log, every operation, porcupine's visualization
// of the partitions it found no linearization of (only those: the
// smallest history that fails), and the servers' logs (and a Patroni
// cluster's).
func report(t *testing.T, r run, o outcome) string {
	dir := filepath.Join(outDir(t), fmt.Sprintf("%s-seed-%d", r.backend, r.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("report: %v", err)
		return "(not written)"
	}
	write := func(name string, lines []string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	write("violations.txt", append([]string{fmt.Sprintf("seed %d; replay with %s", r.seed, r.replay())}, o.violations...))
	var faults, ops []string
	for _, f := range o.faults {
		faults = append(faults, f.String())
	}
	write("faults.log", faults)
	for _, x := range o.ops {
		ops = append(ops, fmt.Sprintf("%10.3fs %10.3fs %s", float64(x.Call)/1e9, float64(x.Return)/1e9, x))
	}
	write("history.txt", ops)
	if len(o.illegal) > 0 {
		var hist []porcupine.Operation
		for _, part := range o.illegal {
			hist = append(hist, part...)
		}
		_, info := porcupine.CheckOperationsVerbose(model, hist, 0)
		if err := porcupine.VisualizePath(model, info, filepath.Join(dir, "linearizability.html")); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	for _, l := range o.logs {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	// A Patroni cluster's logs, which every run so far has written to.
	for _, l := range o.clusterLog {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(dir, "cluster-"+filepath.Base(l)), b, 0o644)
		}
	}
	return dir
}
