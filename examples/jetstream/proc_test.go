package main

import (
	"bytes"
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

// consumerProc runs the example binary, restarted after each kill. Its
// logs of every run go to one file.
type consumerProc struct {
	t    testing.TB
	bin  string
	args []string
	env  []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
}

// startConsumer starts the example with args, logging to a file in dir.
func startConsumer(t testing.TB, dir, name string, env []string, args ...string) *consumerProc {
	t.Helper()
	p := &consumerProc{t: t, bin: binary(t), args: args, env: env, log: filepath.Join(dir, name+".log")}
	p.start()
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd != nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

func (p *consumerProc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
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

// ready reports whether the latest start has bound its consumer.
func (p *consumerProc) ready() bool {
	p.mu.Lock()
	starts := p.starts
	p.mu.Unlock()
	return p.count(`"msg":"consuming"`) >= starts
}

// kill kills the process with SIGKILL and starts it again.
func (p *consumerProc) kill() {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	p.start()
}

// stop stops the process with SIGTERM and fails on an unclean exit.
func (p *consumerProc) stop() {
	p.t.Helper()
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
			p.t.Errorf("consumer exited: %v\n%s", err, p.tail())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		p.t.Errorf("consumer did not stop within 30s of SIGTERM\n%s", p.tail())
	}
}

// logs is everything the process logged.
func (p *consumerProc) logs() []byte {
	b, _ := os.ReadFile(p.log)
	return b
}

// count counts the log lines that hold s.
func (p *consumerProc) count(s string) int { return bytes.Count(p.logs(), []byte(s)) }

// tail is the end of the log, for a failure's message.
func (p *consumerProc) tail() string {
	lines := strings.Split(strings.TrimSpace(string(p.logs())), "\n")
	return fmt.Sprintf("last lines of %s:\n%s", p.log, strings.Join(lines[max(0, len(lines)-30):], "\n"))
}
