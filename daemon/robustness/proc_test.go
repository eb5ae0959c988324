package robustness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{} // build tags to the binary built with them
)

// binary builds paymentsd with tags ("" for none) once per test process,
// into a directory removed when the process's first test to ask ends.
func binary(t *testing.T, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := built[tags]; ok {
		return b
	}
	dir, err := os.MkdirTemp("", "paymentsd-robustness-bin-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "paymentsd")
	args := []string{"build", "-o", path}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if out, err := exec.Command("go", append(args, "../cmd/paymentsd")...).CombinedOutput(); err != nil {
		t.Fatalf("go build paymentsd (tags %q): %v\n%s", tags, err, out)
	}
	built[tags] = path
	return path
}

// removeBinaries removes what binary built; TestMain calls it.
func removeBinaries() {
	for _, b := range built {
		os.RemoveAll(filepath.Dir(b))
	}
}

// server is one paymentsd process, started again on the same addresses
// after a kill, so that the proxies in front of it find it.
type server struct {
	name    string
	bin     string
	args    []string
	logPath string

	grpcAddr, httpAddr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// startServer starts paymentsd with args, on ports of its own choosing,
// logging to logPath, and waits until it listens.
func startServer(t *testing.T, name, bin, logPath string, args ...string) *server {
	t.Helper()
	s := &server{name: name, bin: bin, args: args, logPath: logPath}
	if err := s.start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// start runs the process on the given addresses and waits for its
// "listening" log lines, which name the addresses it took.
func (s *server) start(grpcAddr, httpAddr string) error {
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	from, _ := log.Seek(0, 2)
	fmt.Fprintf(log, "---- robustness: %s starts at %s\n", s.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, append([]string{"--listen", grpcAddr, "--http-listen", httpAddr}, s.args...)...)
	cmd.Env = cleanEnv()
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		g, h := listening(s.logPath, from)
		if g != "" && h != "" {
			s.grpcAddr, s.httpAddr = g, h
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("%s exited at start:\n%s", s.name, b[from:])
		default:
		}
	}
	s.kill()
	return fmt.Errorf("%s did not listen within 30s (log %s)", s.name, s.logPath)
}

// listening reads the gRPC and HTTP addresses from the log after offset.
func listening(path string, offset int64) (grpcAddr, httpAddr string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	f.Seek(offset, 0)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "paymentsd listening":
			grpcAddr = line.Addr
		case "http listening":
			httpAddr = line.Addr
		}
	}
	return grpcAddr, httpAddr
}

// kill sends SIGKILL and waits for the process to end.
func (s *server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// restart starts the killed process again on its addresses; a port
// taken meanwhile by someone else is tried again for a while.
func (s *server) restart() error {
	var err error
	for try := 0; try < 20; try++ {
		if err = s.start(s.grpcAddr, s.httpAddr); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return err
}

func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd.Process.Signal(sig)
	s.paused = sig == syscall.SIGSTOP
}

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// cleanEnv is this process's environment without PAYMENTSD_ settings,
// which the suite's own knobs share a prefix with and the server refuses
// when they are not its own.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if len(kv) < 10 || kv[:10] != "PAYMENTSD_" {
			out = append(out, kv)
		}
	}
	return out
}

// envInt is the integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
