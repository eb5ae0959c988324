package patroni

import (
	"fmt"
	"os"
	"strings"
	"text/template"
)

// The cluster's timing, in seconds. TTL is how long a leader lock
// outlives its holder's last renewal, hence the wait for a new leader
// after the leader's Patroni dies. A renewal every LoopWait leaves room
// for several late loops on two loaded cores. RetryTimeout bounds a
// DCS or PostgreSQL call before Patroni gives up on it: a leader that
// cannot reach etcd for that long demotes itself.
const (
	TTL          = 10
	LoopWait     = 1
	RetryTimeout = 5
)

// MaximumLagOnFailover is how far, in bytes of WAL, a replica may trail
// and still be promoted. In synchronous mode only the synchronous standby
// is promoted, and it is never behind on a commit; the setting guards the
// non-strict case after its standby was gone.
const MaximumLagOnFailover = 1 << 20

// memberConfig is a member's Patroni configuration. Debian's Patroni
// 3.0.2 talks to etcd through the v3 JSON gateway (etcd3:), which etcd 3.4
// serves without --enable-v2. The bootstrap section only counts on the
// first start: it writes the dynamic settings into etcd. Patroni itself
// forces wal_log_hints on, which pg_rewind needs; it is set here too, to
// say so. The parameters keep a member small: three run on two cores.
// The socket lives in the member's directory, not /var/run/postgresql,
// which a system cluster may hold.
var memberConfig = template.Must(template.New("patroni.yml").Parse(`scope: testkit
namespace: /service/
name: {{.Name}}
log:
  level: INFO
  format: '%(asctime)s {{.Name}} %(levelname)s: %(message)s'
restapi:
  listen: 127.0.0.1:{{.APIPort}}
  connect_address: 127.0.0.1:{{.APIPort}}
etcd3:
  hosts: {{.EtcdHosts}}
watchdog:
  mode: 'off'
bootstrap:
  dcs:
    ttl: {{.TTL}}
    loop_wait: {{.LoopWait}}
    retry_timeout: {{.RetryTimeout}}
    maximum_lag_on_failover: {{.MaxLag}}
    synchronous_mode: true
    synchronous_mode_strict: {{.Strict}}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        hot_standby: 'on'
        max_connections: 100
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 64MB
        shared_buffers: 16MB
        recovery_init_sync_method: syncfs
  initdb:
  - encoding: UTF8
  - locale: C
  - auth-local: trust
  - auth-host: scram-sha-256
postgresql:
  listen: 127.0.0.1:{{.Port}}
  connect_address: 127.0.0.1:{{.Port}}
  data_dir: {{.Data}}
  bin_dir: {{.Bin}}
  pgpass: {{.Dir}}/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: {{.Superuser}}
      password: {{.SuperuserPassword}}
    replication:
      username: {{.Replicator}}
      password: {{.ReplicatorPassword}}
  parameters:
    unix_socket_directories: {{.Dir}}
    password_encryption: scram-sha-256
    logging_collector: 'off'
    log_checkpoints: 'off'
    log_line_prefix: '%m {{.Name}} [%p] '
  pg_hba:
  - local all all trust
  - host replication {{.Replicator}} 127.0.0.1/32 scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
`))

// ctlConfig is patronictl's configuration: the cluster's name and etcd.
const ctlConfig = "scope: testkit\nnamespace: /service/\netcd3:\n  hosts: %s\n"

// writeConfig writes m's Patroni configuration, readable by the account
// Patroni runs as.
func (c *Cluster) writeConfig(m *Member) error {
	var b strings.Builder
	err := memberConfig.Execute(&b, map[string]any{
		"Name": m.name, "APIPort": m.apiPort, "Port": m.port,
		"EtcdHosts": c.etcdHosts(), "Data": m.data, "Bin": c.pgBin, "Dir": m.dir,
		"TTL": TTL, "LoopWait": LoopWait, "RetryTimeout": RetryTimeout,
		"MaxLag": MaximumLagOnFailover, "Strict": !c.opts.NotStrict,
		"Superuser": Superuser, "SuperuserPassword": SuperuserPassword,
		"Replicator": ReplicationUser, "ReplicatorPassword": ReplicationPassword,
	})
	if err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	if err := os.WriteFile(m.conf, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	return c.chown(m.conf)
}

// etcdHosts lists the etcd members' client addresses for the etcd3:
// section, all three, so that Patroni survives the loss of any one.
func (c *Cluster) etcdHosts() string {
	hosts := make([]string, len(c.etcds))
	for i, e := range c.etcds {
		hosts[i] = e.Addr()
	}
	return strings.Join(hosts, ",")
}
