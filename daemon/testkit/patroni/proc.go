package patroni

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child of the test binary: an etcd member or a Patroni. It
// leads a process group of its own, so that a kill reaches the tools it
// runs too, and never the test binary.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
}

// startProc starts path with args in dir, appending its output to log.
// cred, when not nil, is the account it runs as. If the test binary dies,
// the kernel kills it (Pdeathsig), and a later Start sweeps the rest.
func startProc(dir, log string, cred *syscall.Credential, env []string, path string, args ...string) (*proc, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("patroni: starting %s: %w", filepath.Base(path), err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited, on its own or killed.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends sig to the process's whole group and waits up to d for the
// process to exit.
func (p *proc) kill(sig syscall.Signal, d time.Duration) error {
	if err := signalGroup(p.pid(), sig); err != nil && !p.exited() {
		return err
	}
	return p.wait(d)
}

// wait waits up to d for the process to exit.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("patroni: %s (pid %d) still runs after %v", filepath.Base(p.cmd.Path), p.pid(), d)
	}
}

// signalGroup sends sig to process group pgid. It refuses the test
// binary's own group and init's, which a bad pid would otherwise name.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return fmt.Errorf("patroni: refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("patroni: signal %v to process group %d: %w", sig, pgid, err)
	}
	return nil
}

// stat is what /proc/pid/stat says of a process.
type stat struct {
	ppid, pgrp int
	state      string // "Z" for a zombie, "T" for a stopped process
}

// readStat reads /proc/pid/stat. ok is false when there is no such
// process.
func readStat(pid int) (s stat, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and
	// parentheses, so the fields are counted from its last ')'.
	str := string(b)
	f := strings.Fields(str[strings.LastIndexByte(str, ')')+1:])
	if len(f) < 3 {
		return stat{}, false
	}
	s.state = f[0]
	s.ppid, _ = strconv.Atoi(f[1])
	s.pgrp, _ = strconv.Atoi(f[2])
	return s, true
}

// alive reports whether pid runs: it exists and is not a zombie, which
// init may reap late.
func alive(pid int) bool {
	s, ok := readStat(pid)
	return ok && s.state != "Z"
}

// cmdline is the process's command line, arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// scan returns the live processes for which match is true.
func scan(match func(pid int, s stat) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ok := readStat(pid); ok && s.state != "Z" && match(pid, s) {
			out = append(out, pid)
		}
	}
	return out
}

// inGroup returns the live processes of group pgid.
func inGroup(pgid int) []int {
	return scan(func(_ int, s stat) bool { return s.pgrp == pgid })
}

// mentioning returns the live processes whose command line contains s, a
// cluster's directory: every PostgreSQL, Patroni and etcd it started
// names it. The test binary itself never does.
func mentioning(s string) []int {
	self := os.Getpid()
	return scan(func(pid int, _ stat) bool { return pid != self && strings.Contains(cmdline(pid), s) })
}

// waitGone waits up to d until none of pids runs. It returns those still
// running.
func waitGone(pids func() []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := pids()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killStray kills the processes that mention dir: their groups when they
// lead one of their own, else each alone. A stopped process is woken, so
// that nothing is left stopped behind a kill it cannot act on.
func killStray(dir string) []int {
	for _, pid := range mentioning(dir) {
		if s, ok := readStat(pid); ok && s.pgrp > 1 && s.pgrp != syscall.Getpgrp() {
			signalGroup(s.pgrp, syscall.SIGCONT)
			signalGroup(s.pgrp, syscall.SIGKILL)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return waitGone(func() []int { return mentioning(dir) }, 30*time.Second)
}

// freePorts picks n distinct loopback ports that are free now, below the
// kernel's ephemeral range: an outgoing connection may take a port from
// that range while a member is down. (pgtest's freePort, n at a time.)
func freePorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	if low <= 11000 {
		return nil, fmt.Errorf("patroni: the ephemeral port range starts at %d, leaving no room below it", low)
	}
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try == 50*n {
			return nil, errors.New("patroni: no free loopback ports below the ephemeral range")
		}
		p := 10000 + rand.IntN(low-10000)
		if slices.Contains(ports, p) {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
