package patroni

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The roles Role reports.
const (
	RoleLeader      = "leader"       // holds the leader lock; its PostgreSQL is the primary
	RoleSyncStandby = "sync_standby" // the replica the leader's commits wait for
	RoleReplica     = "replica"      // any other replica
)

// clusterView is Patroni's GET /cluster: the members as etcd lists them.
type clusterView struct {
	Members []struct {
		Name  string `json:"name"`
		Role  string `json:"role"` // leader, sync_standby, replica
		State string `json:"state"`
	} `json:"members"`
}

// status is Patroni's GET /patroni (and /primary): its PostgreSQL as it
// sees it.
type status struct {
	State       string `json:"state"` // running, stopped, starting, ...
	Role        string `json:"role"`  // master or replica (3.0.2 says master)
	SyncStandby bool   `json:"sync_standby"`
	Replication []struct {
		ApplicationName string `json:"application_name"`
		State           string `json:"state"`      // streaming, ...
		SyncState       string `json:"sync_state"` // sync, async, ...
	} `json:"replication"`
	DCSLastSeen int64 `json:"dcs_last_seen"` // Unix time of its last etcd answer
}

// get GETs url and decodes its JSON answer, whatever the status code,
// into v. A member that does not answer within 3 s counts as down.
func (c *Cluster) get(ctx context.Context, url string, v any) (int, error) {
	return c.do(ctx, http.MethodGet, url, nil, v)
}

func (c *Cluster) do(ctx context.Context, method, url string, body []byte, v any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if err := decode(b, v); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: %w: %.200s", method, url, err, b)
	}
	return resp.StatusCode, nil
}

func (m *Member) api(path string) string { return "http://" + m.APIAddr() + path }

// poll calls check every 200 ms until it is done or ctx ends. The error
// then says what was awaited and check's last reason why not.
func poll(ctx context.Context, what string, check func() (done bool, why string)) error {
	for {
		done, why := check()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroni: waiting for %s: %w; last: %s", what, ctx.Err(), why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awake reports whether the member's Patroni runs and is not paused: one
// to ask, or to wait for.
func (m *Member) awake() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.patroni != nil && !m.patroni.exited() && !m.paused
}

// view is GET /cluster from the first awake member that answers.
func (c *Cluster) view(ctx context.Context) (*clusterView, string) {
	why := "no member's Patroni is running"
	for _, m := range c.members {
		if !m.awake() {
			continue
		}
		var v clusterView
		code, err := c.get(ctx, m.api("/cluster"), &v)
		if err == nil && code == http.StatusOK {
			return &v, ""
		}
		why = fmt.Sprintf("GET %s/cluster: %d %v", m.name, code, err)
	}
	return nil, why
}

// leader is the member etcd names leader, if its own Patroni confirms it
// holds the lock and runs PostgreSQL as the primary: a lock just taken
// may precede the promotion.
func (c *Cluster) leader(ctx context.Context) (*Member, string) {
	v, why := c.view(ctx)
	if v == nil {
		return nil, why
	}
	for _, vm := range v.Members {
		if vm.Role != RoleLeader {
			continue
		}
		m := c.Member(vm.Name)
		if m == nil || !m.awake() {
			return nil, fmt.Sprintf("etcd names %s leader, which is down or paused", vm.Name)
		}
		var st status
		code, err := c.get(ctx, m.api("/primary"), &st)
		if err != nil || code != http.StatusOK || st.Role != "master" || st.State != "running" {
			return nil, fmt.Sprintf("%s holds the lock; GET /primary: %d %v, PostgreSQL %s %s", m.name, code, err, st.State, st.Role)
		}
		return m, ""
	}
	return nil, fmt.Sprintf("no leader in /cluster: %+v", v.Members)
}

// Leader is the leader, from the REST API: the member that holds the
// leader lock and whose PostgreSQL is the primary. During a failover it
// waits for the next one, until ctx ends.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	return c.waitLeader(ctx, "a leader", func(string) bool { return true })
}

// WaitLeader waits until a member other than notName leads: after a
// fault to the leader notName, the one that took over.
func (c *Cluster) WaitLeader(ctx context.Context, notName string) (*Member, error) {
	return c.waitLeader(ctx, "a leader other than "+notName, func(name string) bool { return name != notName })
}

func (c *Cluster) waitLeader(ctx context.Context, what string, ok func(name string) bool) (*Member, error) {
	var leader *Member
	err := poll(ctx, what, func() (bool, string) {
		m, why := c.leader(ctx)
		if m == nil {
			return false, why
		}
		if !ok(m.name) {
			return false, "the leader is " + m.name
		}
		leader = m
		return true, ""
	})
	return leader, err
}

// syncStandby is the leader's synchronous standby: etcd names it so, and
// it streams from the leader as sync. streaming is every member that
// streams from the leader and whose Patroni says its PostgreSQL runs: a
// walreceiver streams before Patroni is done starting its PostgreSQL.
func (c *Cluster) syncStandby(ctx context.Context, l *Member) (sync string, streaming map[string]bool, why string) {
	var st status
	if code, err := c.get(ctx, l.api("/patroni"), &st); err != nil || code != http.StatusOK {
		return "", nil, fmt.Sprintf("GET %s/patroni: %d %v", l.name, code, err)
	}
	var v clusterView
	if code, err := c.get(ctx, l.api("/cluster"), &v); err != nil || code != http.StatusOK {
		return "", nil, fmt.Sprintf("GET %s/cluster: %d %v", l.name, code, err)
	}
	running := map[string]bool{}
	for _, vm := range v.Members {
		running[vm.Name] = vm.State == "running"
	}
	streaming = map[string]bool{}
	syncState := map[string]string{}
	for _, r := range st.Replication {
		if r.State == "streaming" && running[r.ApplicationName] {
			streaming[r.ApplicationName] = true
			syncState[r.ApplicationName] = r.SyncState
		}
	}
	for _, vm := range v.Members {
		if vm.Role == RoleSyncStandby && (syncState[vm.Name] == "sync" || syncState[vm.Name] == "quorum") {
			return vm.Name, streaming, ""
		}
	}
	return "", streaming, fmt.Sprintf("leader %s has no synchronous standby streaming: pg_stat_replication %+v; /cluster %+v", l.name, st.Replication, v.Members)
}

// SyncStandby is the leader's synchronous standby, streaming. It waits
// for one until ctx ends.
func (c *Cluster) SyncStandby(ctx context.Context) (*Member, error) {
	var sync *Member
	err := poll(ctx, "a synchronous standby", func() (bool, string) {
		l, why := c.leader(ctx)
		if l == nil {
			return false, why
		}
		name, _, why := c.syncStandby(ctx, l)
		sync = c.Member(name)
		return sync != nil, why
	})
	return sync, err
}

// WaitHealthy waits until there is a leader, its synchronous standby
// streams, and so does every other member whose Patroni the kit runs:
// not killed (KillPatroni) or stopped (Stop). A paused member counts: it
// is waited for.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, "a healthy cluster", func() (bool, string) { return c.healthy(ctx) })
}

func (c *Cluster) healthy(ctx context.Context) (bool, string) {
	l, why := c.leader(ctx)
	if l == nil {
		return false, why
	}
	sync, streaming, why := c.syncStandby(ctx, l)
	if sync == "" {
		return false, why
	}
	for _, m := range c.members {
		run, exited := m.running()
		switch {
		case m == l || !run:
		case exited:
			return false, fmt.Sprintf("%s's Patroni exited:\n%s", m.name, tail(m.log, 10))
		case !streaming[m.name]:
			return false, fmt.Sprintf("%s does not run and stream from leader %s", m.name, l.name)
		}
	}
	return true, ""
}

// Role is the member's role as its own Patroni reports it: RoleLeader,
// RoleSyncStandby or RoleReplica. It is an error when its Patroni does
// not answer, its PostgreSQL does not run, or runs as a primary without
// the lock (a former leader about to demote itself).
func (m *Member) Role(ctx context.Context) (string, error) {
	var st status
	code, err := m.c.get(ctx, m.api("/primary"), &st)
	switch {
	case err != nil:
		return "", fmt.Errorf("patroni: %s's REST API: %w", m.name, err)
	case st.State != "running":
		return "", fmt.Errorf("patroni: %s: PostgreSQL is %q", m.name, st.State)
	case code == http.StatusOK && st.Role == "master":
		return RoleLeader, nil
	case st.Role == "master":
		return "", fmt.Errorf("patroni: %s: PostgreSQL runs as a primary, but Patroni holds no leader lock", m.name)
	case st.SyncStandby:
		return RoleSyncStandby, nil
	}
	return RoleReplica, nil
}

// Switchover hands the leadership to candidate, a clean switch that loses
// nothing, with patronictl switchover --force. In synchronous mode
// Patroni accepts only the synchronous standby as the candidate; ""
// lets it choose. It returns once the new leader is confirmed, or ctx
// ends.
func (c *Cluster) Switchover(ctx context.Context, candidate string) error {
	l, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	args := []string{"switchover", "--leader", l.name, "--force"}
	if candidate != "" {
		args = append(args, "--candidate", candidate)
	}
	// patronictl exits 0 even when Patroni refuses: its output says so.
	out, err := c.patronictl(ctx, args...)
	if err != nil || bytes.Contains(out, []byte("failed")) || bytes.Contains(out, []byte("Could not")) {
		return fmt.Errorf("patroni: patronictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if candidate == "" {
		_, err = c.WaitLeader(ctx, l.name)
		return err
	}
	_, err = c.waitLeader(ctx, candidate+" as the leader", func(name string) bool { return name == candidate })
	return err
}

// EtcdLeader is the etcd member that leads etcd's Raft now, by the
// members' own status: killing it costs an election as well.
func (c *Cluster) EtcdLeader(ctx context.Context) (*Etcd, error) {
	var leader *Etcd
	err := poll(ctx, "an etcd leader", func() (bool, string) {
		why := "no etcd member answers"
		for _, e := range c.etcds {
			var st struct {
				Header struct {
					MemberID string `json:"member_id"`
				} `json:"header"`
				Leader string `json:"leader"`
			}
			code, err := c.do(ctx, http.MethodPost, "http://"+e.Addr()+"/v3/maintenance/status", []byte("{}"), &st)
			if err != nil || code != http.StatusOK {
				why = fmt.Sprintf("%s: %d %v", e.name, code, err)
				continue
			}
			if st.Header.MemberID != "" && st.Header.MemberID == st.Leader {
				leader = e
				return true, ""
			}
		}
		return false, why
	})
	return leader, err
}
