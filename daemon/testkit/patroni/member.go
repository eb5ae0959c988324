package patroni

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Member is one PostgreSQL under its Patroni. Its ports and directory
// stay the same for the cluster's life, so URLs stay valid across faults.
type Member struct {
	c       *Cluster
	name    string
	dir     string // the member's directory: data/, patroni.yml, socket
	data    string
	conf    string
	log     string // Patroni's output and PostgreSQL's
	port    int
	apiPort int

	mu       sync.Mutex
	patroni  *proc // nil while killed or stopped
	paused   bool
	pausedPG []int // the PostgreSQL processes Pause stopped
}

// Name is the member's Patroni name, pg0 to pg2.
func (m *Member) Name() string { return m.name }

// Addr is host:port of the member's PostgreSQL.
func (m *Member) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port)) }

// APIAddr is host:port of the member's Patroni REST API.
func (m *Member) APIAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.apiPort)) }

// AdminURL is the superuser's URL of database db on this member alone,
// leader or not: a test reads a standby through it. It contains the
// password.
func (m *Member) AdminURL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(Superuser, SuperuserPassword),
		Host:     m.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable&connect_timeout=10",
	}
	return u.String()
}

// StartPatroni starts the member's Patroni, at Start, or again after
// KillPatroni or Stop. It finds PostgreSQL running or starts it, then
// joins the cluster: a former leader is demoted, rewound with pg_rewind
// if it diverged, and follows the new one. It returns once Patroni runs;
// WaitHealthy waits for the member to stream.
func (m *Member) StartPatroni() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.patroni != nil {
		return fmt.Errorf("patroni: StartPatroni: %s's Patroni is running", m.name)
	}
	p, err := startProc(m.dir, m.log, m.c.cred, minimalEnv(m.dir), m.c.patroniBin, m.conf)
	if err != nil {
		return err
	}
	m.patroni = p
	return nil
}

// KillPatroni kills the member's Patroni with SIGKILL, with any tool it
// runs (its process group), but not PostgreSQL: Patroni starts that in a
// session of its own. A leader's PostgreSQL thus runs on as a primary,
// and its lock expires within TTL; then the synchronous standby takes
// over. It returns once Patroni has exited.
func (m *Member) KillPatroni() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.patroni == nil {
		return fmt.Errorf("patroni: KillPatroni: %s's Patroni is not running", m.name)
	}
	err := m.patroni.kill(syscall.SIGKILL, 30*time.Second)
	m.patroni = nil
	return err
}

// KillPostgres kills the member's PostgreSQL with SIGKILL: the
// postmaster's process group and every process the postmaster started,
// each in a session of its own. Patroni lives on and restarts it: a
// leader still holding its lock recovers in place, a replica rejoins. It
// returns once they are all gone.
func (m *Member) KillPostgres() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pid, pgid, err := m.postmaster()
	if err != nil {
		return fmt.Errorf("patroni: KillPostgres: %s: %w", m.name, err)
	}
	pids := stopPostgres(pid, pgid)
	m.pausedPG = nil // gone, with their pids
	signalGroup(pgid, syscall.SIGKILL)
	signalAll(pids, syscall.SIGKILL)
	if left := waitGone(postgresLeft(pids, pgid), 30*time.Second); len(left) > 0 {
		return fmt.Errorf("patroni: KillPostgres: %s: still running 30 s after SIGKILL:%s", m.name, describe(left))
	}
	return nil
}

// stopPostgres stops a postmaster and every process it started with
// SIGSTOP, and returns their pids, the postmaster's first. Stopped first,
// it forks nothing while its children are listed. The postmaster's group
// alone would miss them: PostgreSQL puts each child in a session of its
// own (setsid), so that a signal to the child reaches what it runs too.
func stopPostgres(pid, pgid int) []int {
	syscall.Kill(pid, syscall.SIGSTOP)
	signalGroup(pgid, syscall.SIGSTOP)
	pids := append([]int{pid}, children(pid)...)
	signalAll(pids[1:], syscall.SIGSTOP)
	return pids
}

// children returns the live processes whose parent is pid.
func children(pid int) []int {
	return scan(func(_ int, s stat) bool { return s.ppid == pid })
}

// signalAll sends sig to each of pids: to its group when it leads one,
// as PostgreSQL's children do.
func signalAll(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		if s, ok := readStat(p); ok && s.pgrp == p {
			signalGroup(p, sig)
		} else {
			syscall.Kill(p, sig)
		}
	}
}

// postgresLeft returns a func listing which of pids, and of group pgid,
// still run.
func postgresLeft(pids []int, pgid int) func() []int {
	return func() []int {
		left := inGroup(pgid)
		for _, p := range pids {
			if alive(p) && !slices.Contains(left, p) {
				left = append(left, p)
			}
		}
		return left
	}
}

// PostmasterPID is the pid of the member's running postmaster, read from
// postmaster.pid. A test checks with it that a fault left PostgreSQL
// alone, or that it was restarted.
func (m *Member) PostmasterPID() (int, error) {
	pid, _, err := m.postmaster()
	return pid, err
}

// postmaster returns the running postmaster's pid and process group. The
// pid is postmaster.pid's first line, checked to be a live process whose
// command line names the data directory: a stale file's pid may be
// anyone's now.
func (m *Member) postmaster() (pid, pgid int, err error) {
	b, err := os.ReadFile(filepath.Join(m.data, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, errors.New("PostgreSQL is not running (no postmaster.pid)")
	}
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, 0, fmt.Errorf("postmaster.pid starts with %q, not a pid", line)
	}
	s, ok := readStat(pid)
	if !ok || s.state == "Z" || !strings.Contains(cmdline(pid), m.data) {
		return 0, 0, fmt.Errorf("PostgreSQL is not running (postmaster.pid names pid %d, gone)", pid)
	}
	return pid, s.pgrp, nil
}

// Pause stops the member with SIGSTOP: Patroni's process group, the
// postmaster's and every process the postmaster started. It is a hung
// machine: connections stay open, nothing answers, and its keys in etcd
// expire within TTL: a leader's lock, a synchronous standby's place.
// Resume wakes it (see there about a paused leader).
func (m *Member) Pause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused {
		return fmt.Errorf("patroni: Pause: %s is paused", m.name)
	}
	// Patroni first: it then sees nothing of PostgreSQL's stop.
	if m.patroni != nil {
		if err := signalGroup(m.patroni.pid(), syscall.SIGSTOP); err != nil {
			return err
		}
	}
	m.paused = true
	if pid, pgid, err := m.postmaster(); err == nil {
		m.pausedPG = stopPostgres(pid, pgid)
	}
	return nil
}

// Resume wakes a paused member with SIGCONT, PostgreSQL first, so that
// Patroni finds it running. A leader that lost its lock meanwhile should
// find the new leader and demote itself.
//
// Debian 12's Patroni 3.0.2 may not: woken with the cluster view it had
// when it stopped, a leader whose lease expired takes a new lease and
// puts the leader key unconditionally, over the new leader's
// (patroni/patroni#2689, fixed in 3.0.3). The new leader, promoted on a
// new timeline, demotes itself; what it committed is thrown away; the
// standbys, on its timeline, may never stream from the old leader again,
// whose stale cache can also keep it failing to write the sync key
// (#2779, #2783, #2787, fixed in 3.1). Resume does not hide that: it is
// what a stalled leader does in production on that Patroni. Pause a
// replica, or KillPatroni the leader, for a fault without it.
func (m *Member) Resume() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.paused {
		return fmt.Errorf("patroni: Resume: %s is not paused", m.name)
	}
	return m.resume()
}

func (m *Member) resume() error {
	if len(m.pausedPG) > 0 {
		signalAll(m.pausedPG[1:], syscall.SIGCONT)
		if s, ok := readStat(m.pausedPG[0]); ok {
			signalGroup(s.pgrp, syscall.SIGCONT)
			syscall.Kill(m.pausedPG[0], syscall.SIGCONT)
		}
	}
	m.paused, m.pausedPG = false, nil
	if m.patroni == nil {
		return nil
	}
	return signalGroup(m.patroni.pid(), syscall.SIGCONT)
}

// Stop stops the member cleanly: SIGTERM to Patroni, which stops
// PostgreSQL (fast mode), hands its lock over if it leads, and exits. It
// takes a standby away: with synchronous_mode_strict and no standby left,
// the leader's commits wait. StartPatroni starts it again. It returns
// once both have exited.
func (m *Member) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.patroni == nil {
		return fmt.Errorf("patroni: Stop: %s's Patroni is not running", m.name)
	}
	if m.paused {
		m.resume()
	}
	if err := syscall.Kill(m.patroni.pid(), syscall.SIGTERM); err != nil {
		return fmt.Errorf("patroni: Stop: %s: %w", m.name, err)
	}
	if err := m.patroni.wait(2 * time.Minute); err != nil {
		return err
	}
	m.patroni = nil
	if pid, pgid, err := m.postmaster(); err == nil {
		left := postgresLeft(append([]int{pid}, children(pid)...), pgid)
		if left := waitGone(left, time.Minute); len(left) > 0 {
			return fmt.Errorf("patroni: Stop: %s: PostgreSQL still runs a minute after Patroni exited:%s", m.name, describe(left))
		}
	}
	return nil
}

// running reports whether the member's Patroni should be running: it was
// started, and neither killed nor stopped since.
func (m *Member) running() (yes bool, exited bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.patroni != nil, m.patroni != nil && m.patroni.exited()
}

// halt kills the member for good, at the test's end: Patroni first,
// lest it restart PostgreSQL, then PostgreSQL, all with SIGKILL, which
// a stopped process cannot ignore either. The data directory goes next,
// so the System V segment a killed postmaster leaves is removed here.
func (m *Member) halt() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if m.patroni != nil {
		errs = append(errs, m.patroni.kill(syscall.SIGKILL, 30*time.Second))
		m.patroni = nil
	}
	m.paused, m.pausedPG = false, nil
	key, shmid := m.shm()
	pid, pgid, err := m.postmaster()
	if err != nil {
		removeShm(key, shmid) // a postmaster killed before, never restarted
		return errors.Join(errs...)
	}
	pids := stopPostgres(pid, pgid)
	signalGroup(pgid, syscall.SIGKILL)
	signalAll(pids, syscall.SIGKILL)
	if left := waitGone(postgresLeft(pids, pgid), 30*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("patroni: %s: PostgreSQL still runs 30 s after SIGKILL:%s", m.name, describe(left)))
	}
	removeShm(key, shmid)
	return errors.Join(errs...)
}

// shm is the key and id of the System V shared memory segment that
// postmaster.pid names on its seventh line, or -1s.
func (m *Member) shm() (key, id int) {
	b, _ := os.ReadFile(filepath.Join(m.data, "postmaster.pid"))
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return -1, -1
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return -1, -1
	}
	key, err1 := strconv.Atoi(f[0])
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return -1, -1
	}
	return key, id
}

// removeShm removes segment id if it still has key and nothing attached.
// A postmaster killed with SIGKILL leaves its segment behind, and the
// next postmaster on the data directory, which would reclaim it, never
// comes: the directory is removed.
func removeShm(key, id int) {
	var d unix.SysvShmDesc
	if id < 0 {
		return
	}
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &d); err == nil && int(d.Perm.Key) == key && d.Nattch == 0 {
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	}
}
