package patroni

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Etcd is one member of the cluster's etcd, the DCS Patroni keeps its
// leader lock in. It runs as the test's own user: only PostgreSQL refuses
// root.
type Etcd struct {
	c          *Cluster
	name, dir  string
	log        string
	clientPort int
	peerPort   int

	mu sync.Mutex
	p  *proc // nil once killed
}

// Name is the member's etcd name, etcd0 to etcd2.
func (e *Etcd) Name() string { return e.name }

// Addr is host:port of the member's client (v3 API) listener.
func (e *Etcd) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.clientPort)) }

// Kill kills the member with SIGKILL, as a crash of its machine would. The
// other two keep the quorum; Patroni's client moves to them. Kill returns
// once it has exited.
func (e *Etcd) Kill() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p == nil {
		return fmt.Errorf("patroni: Kill: %s is not running", e.name)
	}
	err := e.p.kill(syscall.SIGKILL, 30*time.Second)
	e.p = nil
	return err
}

// Start starts a killed member again on its data directory, where it
// finds its place in the cluster. It returns once the member reports
// itself healthy, that is, it has a leader again.
func (e *Etcd) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p != nil {
		return fmt.Errorf("patroni: Start: %s is running", e.name)
	}
	if err := e.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e.waitHealthy(ctx)
}

// start runs etcd. Every flag is given, though a restart reads its
// membership from its data directory. The timeouts are 1.5 times etcd's
// defaults: on two loaded cores a heartbeat is sometimes late, and a
// needless election is a pause for every Patroni. Longer, the election
// after a leader's death would outlast Patroni's retry_timeout, and the
// PostgreSQL leader would demote itself.
func (e *Etcd) start() error {
	peers := make([]string, len(e.c.etcds))
	for i, o := range e.c.etcds {
		peers[i] = fmt.Sprintf("%s=http://127.0.0.1:%d", o.name, o.peerPort)
	}
	client := "http://" + e.Addr()
	peer := fmt.Sprintf("http://127.0.0.1:%d", e.peerPort)
	p, err := startProc(e.c.root, e.log, nil, minimalEnv(e.c.root), e.c.etcdBin,
		"--name", e.name, "--data-dir", e.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(peers, ","),
		"--initial-cluster-state", "new", "--initial-cluster-token", filepath.Base(e.c.root),
		"--heartbeat-interval", "150", "--election-timeout", "1500",
		"--logger", "zap", "--log-outputs", "stderr")
	if err != nil {
		return err
	}
	e.p = p
	return nil
}

// waitHealthy waits until GET /health says true: the member has a leader
// and serves reads.
func (e *Etcd) waitHealthy(ctx context.Context) error {
	return poll(ctx, e.name+" healthy", func() (bool, string) {
		if e.p != nil && e.p.exited() {
			return false, "etcd exited: " + tail(e.log, 5)
		}
		var h struct{ Health string }
		if code, err := e.c.get(ctx, "http://"+e.Addr()+"/health", &h); err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("GET /health: %d %v", code, err)
		}
		return h.Health == "true", "health: " + h.Health
	})
}

// halt kills the member for good, at the test's end.
func (e *Etcd) halt() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p == nil {
		return nil
	}
	err := e.p.kill(syscall.SIGKILL, 30*time.Second)
	e.p = nil
	return err
}

// decode is json.Unmarshal into v, for a REST answer.
func decode(b []byte, v any) error {
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}
