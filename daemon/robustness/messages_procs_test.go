package robustness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	exampleOnce sync.Once
	exampleBin  string
	exampleErr  error
)

// exampleBinary builds examples/jetstream once per test process, into
// the directory of paymentsd's binaries, which TestMain removes.
func exampleBinary(t *testing.T) string {
	t.Helper()
	exampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paymentsd-robustness-bin-")
		if err != nil {
			exampleErr = err
			return
		}
		buildMu.Lock()
		built["example jetstream"] = filepath.Join(dir, "jetstream")
		buildMu.Unlock()
		exampleBin = filepath.Join(dir, "jetstream")
		if out, err := exec.Command("go", "build", "-C", "../../examples", "-o", exampleBin, "./jetstream").CombinedOutput(); err != nil {
			exampleErr = fmt.Errorf("go build examples/jetstream: %v\n%s", err, out)
		}
	})
	if exampleErr != nil {
		t.Fatal(exampleErr)
	}
	return exampleBin
}
