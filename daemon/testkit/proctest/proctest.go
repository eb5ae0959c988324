// Package proctest runs a test's child process that can be killed,
// paused and started again, with the logs of all its runs in one file.
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one child process, started again after each Kill.
type Proc struct {
	Log string // the file its runs log to

	t    testing.TB
	bin  string
	args []string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
}

// Start runs bin with args and env (beside the test's own) logging to
// log. The test's end kills it.
func Start(t testing.TB, bin, log string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Log: log, t: t, bin: bin, args: args, env: env}
	p.start()
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies too
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.starts++
	p.mu.Unlock()
}

// Started reports whether every start so far has logged marker.
func (p *Proc) Started(marker string) bool {
	p.mu.Lock()
	starts := p.starts
	p.mu.Unlock()
	return strings.Count(p.Logs(), marker) >= starts
}

// Kill kills the process with SIGKILL and starts it again.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	p.start()
}

// Pause stops the process with SIGSTOP for d, then SIGCONT. stopped runs
// once it is stopped.
func (p *Proc) Pause(d time.Duration, stopped func()) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGSTOP)
	stopped()
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGCONT)
}

// Stop stops the process with SIGTERM; an unclean exit is returned.
func (p *Proc) Stop() error {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s exited: %v", filepath.Base(p.Log), err)
		}
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM", filepath.Base(p.Log))
	}
}

// Logs is everything the process logged, over all its runs.
func (p *Proc) Logs() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimSpace(p.Logs()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
