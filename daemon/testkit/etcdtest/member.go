package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Member is one etcd process of a cluster, with its data directory.
type Member struct {
	c          *Cluster
	name, dir  string
	log        string
	clientPort int
	peerPort   int

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil once killed
	done   chan struct{} // closed once cmd has exited and been reaped
	paused bool
}

// Addr is host:port of the member's client listener.
func (m *Member) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.clientPort))
}

// Endpoint is the member's client URL, as a client is given it.
func (m *Member) Endpoint() string { return "http://" + m.Addr() }

// Kill kills the member with SIGKILL, as a crash of its machine would,
// paused or not. It returns once the process has exited.
func (m *Member) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return fmt.Errorf("etcdtest: Kill: %s is not running", m.name)
	}
	return m.kill()
}

// Start starts a killed member again on its data directory, where it
// finds its place in the cluster. It returns once the member listens. It
// does not wait for it to rejoin: with a quorum down, it cannot yet;
// Cluster.WaitHealthy waits for that.
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcdtest: Start: %s is running", m.name)
	}
	return m.start()
}

// Pause stops the member with SIGSTOP: its connections stay open and
// nothing answers, as with a machine that hangs.
func (m *Member) Pause() error { return m.signal(syscall.SIGSTOP, true) }

// Resume wakes a paused member with SIGCONT.
func (m *Member) Resume() error { return m.signal(syscall.SIGCONT, false) }

func (m *Member) signal(sig syscall.Signal, paused bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return fmt.Errorf("etcdtest: %v: %s is not running", sig, m.name)
	}
	if err := syscall.Kill(-m.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("etcdtest: %v to %s: %w", sig, m.name, err)
	}
	m.paused = paused
	return nil
}

// serving reports whether the member runs and is not paused.
func (m *Member) serving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil && !m.paused
}

// start runs etcd and waits until it listens. Every flag is given, though
// a restart reads its membership from its data directory. The timeouts
// are 1.5 times etcd's defaults, as in the patroni kit: on two loaded
// cores a heartbeat is sometimes late.
func (m *Member) start() error {
	peers := make([]string, len(m.c.members))
	for i, o := range m.c.members {
		peers[i] = fmt.Sprintf("%s=http://127.0.0.1:%d", o.name, o.peerPort)
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", m.peerPort)
	cmd := exec.Command(m.c.bin, "--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.Endpoint(), "--advertise-client-urls", m.Endpoint(),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(peers, ","),
		"--initial-cluster-state", "new", "--initial-cluster-token", m.c.token,
		"--heartbeat-interval", "150", "--election-timeout", "1500",
		"--logger", "zap", "--log-outputs", "stderr")
	if err := m.run(cmd); err != nil {
		return err
	}
	return m.waitListening(30 * time.Second)
}

// run starts cmd logging to the member's log. It leads a process group of
// its own, so that a signal never reaches the test binary, and dies with
// the test binary (Pdeathsig). The test's environment could steer it
// (ETCD_* variables set flags), so it gets a minimal one.
func (m *Member) run(cmd *exec.Cmd) error {
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("etcdtest: %w", err)
	}
	defer f.Close() // the child has its own copy
	cmd.Dir = m.c.dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + m.c.dir, "LANG=C.UTF-8"}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: starting %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	m.cmd, m.done, m.paused = cmd, done, false
	return nil
}

// waitListening waits up to d until the member's client port accepts a
// connection. It fails at once if etcd exits.
func (m *Member) waitListening(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		select {
		case <-m.done:
			m.cmd = nil
			return fmt.Errorf("etcdtest: %s exited at its start:\n%s", m.name, tail(m.log, 20))
		default:
		}
		if conn, err := net.DialTimeout("tcp", m.Addr(), time.Second); err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdtest: %s does not listen on %s after %v:\n%s", m.name, m.Addr(), d, tail(m.log, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHealthy waits until GET /health says true: the member has a leader
// and serves reads.
func (m *Member) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer yet"
	for {
		var h struct{ Health string }
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Endpoint()+"/health", nil)
		if err != nil {
			return fmt.Errorf("etcdtest: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = json.Unmarshal(b, &h)
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		}
		if err == nil && h.Health == "true" {
			return nil
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdtest: %s not healthy (%s): %w", m.name, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL to the member's process group and waits for the
// process to exit. m.mu is held.
func (m *Member) kill() error {
	pid := m.cmd.Process.Pid
	if pid <= 1 || pid == syscall.Getpgrp() {
		return fmt.Errorf("etcdtest: refusing to signal process group %d", pid)
	}
	syscall.Kill(-pid, syscall.SIGKILL) // a stopped process dies too
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("etcdtest: %s (pid %d) still runs 30s after SIGKILL", m.name, pid)
	}
	m.cmd, m.paused = nil, false
	return nil
}

// halt kills the member if it runs, at the end.
func (m *Member) halt() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	return m.kill()
}
