package config_test

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/once"
)

func TestDefault_PassesCheck_ServesWithoutFlags(t *testing.T) {
	c := config.Default()
	if err := c.Check(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	want := config.Config{
		Listen: "localhost:50051", DB: filepath.Join("data", "paymentsd.db"), PlacementPrefix: "/paymentsd/",
		Lease: once.DefaultLease, TTL: once.DefaultTTL, SweepInterval: time.Minute,
		ShutdownGrace: 30 * time.Second, HandlerTimeout: once.DefaultHandlerTimeout,
		HTTPListen: "localhost:8080", PrincipalFrom: "bearer",
		Limits: config.Limits{
			MaxConnections: 4096, MaxCalls: 1024, MaxStreams: 256, MaxHeaderBytes: 64 << 10, HeaderTimeout: 10 * time.Second,
			KeepaliveMinTime: 10 * time.Second, KeepaliveNoStream: true, KeepaliveInterval: time.Minute, KeepaliveTimeout: 20 * time.Second,
			MaxConnectionIdle: 5 * time.Minute, MaxConnectionAge: 30 * time.Minute, MaxConnectionGrace: 30 * time.Second,
			MaxUnreadPerConn: 4 << 20, MaxUnread: 32 << 20, UnreadGrace: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxAnonymousCalls: 128,
		},
	}
	if c != want {
		t.Errorf("Default() = %+v, want %+v", c, want)
	}
}

func TestCheck_RefusesEach_SayingWhich(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *config.Config)
		want string
	}{
		{"no db", func(c *config.Config) { c.DB = "" }, "--db must name a data file or a postgres:// URL"},
		{"key=value db", func(c *config.Config) { c.DB = "host=db password=x" }, "--db must be a bbolt file's path, or a PostgreSQL URL starting postgres:// or postgresql://; other connection strings (key=value, other URL schemes) are not taken, rather than made a file of that name"},
		{"no listen", func(c *config.Config) { c.Listen = "" }, "--listen must name an address (host:port)"},
		{"lease 0", func(c *config.Config) { c.Lease = 0 }, "need 0 < --lease < --ttl <= 876000h0m0s, got 0s and 24h0m0s"},
		{"ttl not above lease", func(c *config.Config) { c.Lease, c.TTL = time.Hour, time.Hour }, "need 0 < --lease < --ttl <= 876000h0m0s, got 1h0m0s and 1h0m0s"},
		{"ttl past the stores' times", func(c *config.Config) { c.TTL = 250 * 365 * 24 * time.Hour }, "need 0 < --lease < --ttl <= 876000h0m0s, got 30s and 2190000h0m0s"},
		{"sweep 0", func(c *config.Config) { c.SweepInterval = 0 }, "--sweep-interval must be positive, got 0s"},
		{"in-flight-wait negative", func(c *config.Config) { c.InFlightWait = -time.Second }, "--in-flight-wait must not be negative, got -1s"},
		{"handler timeout 0", func(c *config.Config) { c.HandlerTimeout = 0 }, "--handler-timeout must be positive, got 0s"},
		{"grace negative", func(c *config.Config) { c.ShutdownGrace = -time.Second }, "--shutdown-grace must not be negative, got -1s"},
		{"pool negative", func(c *config.Config) { c.DBPool = -1 }, "--db-pool must be at least 1, got -1"},
		{"cert without key", func(c *config.Config) { c.TLSCert = "c.pem" }, "--tls-cert and --tls-key go together: give both or neither"},
		{"key without cert", func(c *config.Config) { c.TLSKey = "k.pem" }, "--tls-cert and --tls-key go together: give both or neither"},
		{"client CA without TLS", func(c *config.Config) { c.TLSClientCA = "ca.pem" }, "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first"},
		{"client CRL without client CA", func(c *config.Config) { c.TLSCert, c.TLSKey, c.TLSClientCRL = "c", "k", "crl" },
			"--tls-client-crl needs --tls-client-ca: it revokes client certificates those CAs signed"},
		{"principal-from unknown", func(c *config.Config) { c.PrincipalFrom = "header" }, `--principal-from: "header" is not one of bearer, cert, either`},
		{"principal-from cert without CA", func(c *config.Config) { c.PrincipalFrom = "cert" }, "--principal-from cert needs --tls-client-ca: principals from certificates need certificates verified"},
		{"api-keys with cert", func(c *config.Config) {
			c.PrincipalFrom, c.TLSCert, c.TLSKey, c.TLSClientCA, c.APIKeysPath = "cert", "c", "k", "ca", "keys"
		}, "--api-keys has no use with --principal-from cert, which reads no token: drop it, or use --principal-from either"},
		{"admin-listen without admin-keys", func(c *config.Config) { c.AdminListen = "localhost:8081" }, "--admin-listen needs --admin-keys: the console answers operators only"},
		{"admin-keys without admin-listen", func(c *config.Config) { c.AdminKeysPath = "admin-keys" }, "--admin-keys has no use without --admin-listen, which serves the console"},
		{"admin-keys the api-keys", func(c *config.Config) {
			c.AdminListen, c.AdminKeysPath, c.APIKeysPath = "localhost:8081", "./keys", "keys"
		}, "--admin-keys and --api-keys name the same file: a customer's token must not be an operator's"},
		{"max-calls 0", func(c *config.Config) { c.Limits.MaxCalls = 0 }, "--max-calls must be at least 1, got 0"},
		{"header bytes small", func(c *config.Config) { c.Limits.MaxHeaderBytes = 100 }, "--grpc-max-header-bytes must be at least 1024, got 100"},
		{"idle 0", func(c *config.Config) { c.Limits.MaxConnectionIdle = 0 }, "--grpc-max-connection-idle must be positive, got 0s"},
		{"age grace negative", func(c *config.Config) { c.Limits.MaxConnectionGrace = -time.Second }, "--grpc-max-connection-age-grace must be 0 or more, got -1s"},
		{"network without credentials", func(c *config.Config) { c.Listen = "0.0.0.0:50051" },
			"--listen 0.0.0.0:50051: not a loopback address, and no credential is required, so any bearer token would be served; " +
				"require credentials with --api-keys (or --tls-client-ca with --principal-from cert), or pass --dev to serve dev mode on a network anyway"},
		{"every listener named", func(c *config.Config) {
			c.Listen, c.HTTPListen, c.MetricsListen = "127.0.0.1:1", ":8080", "[::]:9090"
		}, "--http-listen :8080, --metrics-listen [::]:9090: not a loopback address, and no credential is required, so any bearer token would be served; " +
			"require credentials with --api-keys (or --tls-client-ca with --principal-from cert), or pass --dev to serve dev mode on a network anyway"},
		{"principal-from either is open without api-keys", func(c *config.Config) {
			c.Listen, c.TLSCert, c.TLSKey, c.TLSClientCA, c.PrincipalFrom = "10.0.0.1:1", "c", "k", "ca", "either"
		}, "--listen 10.0.0.1:1: not a loopback address, and no credential is required, so any bearer token would be served; " +
			"require credentials with --api-keys (or --tls-client-ca with --principal-from cert), or pass --dev to serve dev mode on a network anyway"},
		{"dev with api-keys", func(c *config.Config) { c.Dev, c.APIKeysPath = true, "keys" },
			"--dev accepts any bearer token: it has no use with --api-keys or --principal-from cert, which require credentials"},
		{"console in plaintext on a network", func(c *config.Config) {
			c.APIKeysPath, c.AdminListen, c.AdminKeysPath = "keys", "0.0.0.0:8081", "admin"
		}, "--admin-listen 0.0.0.0:8081 is not a loopback address: the console needs --tls-cert and --tls-key there, as operators' tokens would cross the network in plaintext"},
		{"metrics token without metrics", func(c *config.Config) { c.MetricsTokenPath = "token" },
			"--metrics-token-file has no use without --metrics-listen, which serves /metrics"},
		{"pods without etcd", func(c *config.Config) { c.PodsPath = "pods" }, "--pods needs --placement-etcd: the directory of where each principal lives"},
		{"etcd without pods", func(c *config.Config) { c.PlacementEtcd = "http://127.0.0.1:2379" }, "--placement-etcd has no use without --pods, the databases it places principals on"},
		{"pods and db", func(c *config.Config) { c.PodsPath, c.PlacementEtcd, c.DB = "pods", "http://e:2379", "postgres://h/db" },
			"--pods and --db both name where the data lives: give one"},
		{"prefix without slash", func(c *config.Config) { c.PodsPath, c.PlacementEtcd, c.PlacementPrefix = "pods", "http://e:2379", "/p" },
			`--placement-prefix must end with /, got "/p"`},
		{"db refused before the rest", func(c *config.Config) { c.DB, c.Listen = "", "" }, "--db must name a data file or a postgres:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.set(&c)
			if err := c.Check(); err == nil || err.Error() != tc.want {
				t.Errorf("Check() = %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestCheck_ServesANetworkWithCredentialsOrByName(t *testing.T) {
	for name, set := range map[string]func(c *config.Config){
		"api keys":        func(c *config.Config) { c.APIKeysPath = "keys" },
		"cert principals": func(c *config.Config) { c.TLSCert, c.TLSKey, c.TLSClientCA, c.PrincipalFrom = "c", "k", "ca", "cert" },
		"dev":             func(c *config.Config) { c.Dev = true },
		"console with TLS": func(c *config.Config) {
			c.APIKeysPath, c.AdminListen, c.AdminKeysPath, c.TLSCert, c.TLSKey = "keys", "192.0.2.1:8081", "admin", "c", "k"
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := config.Default()
			c.Listen, c.HTTPListen, c.MetricsListen = "0.0.0.0:50051", ":8080", "[::]:9090"
			set(&c)
			if err := c.Check(); err != nil {
				t.Errorf("Check() = %v", err)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"localhost:1": true, "LOCALHOST:1": true, "127.0.0.1:1": true, "127.3.4.5:1": true, "[::1]:1": true,
		":1": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "myhost:1": false, "localhost": false,
		"[::ffff:127.0.0.1]:1": true,
	} {
		if got := config.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestParseDB(t *testing.T) {
	for db, want := range map[string]string{
		"data/x.db": "", "POSTGRES://h/d": "postgres://h/d", "postgresql://u:p@h/d": "postgresql://u:p@h/d",
	} {
		if got, err := config.ParseDB(db); err != nil || got != want {
			t.Errorf("ParseDB(%q) = %q, %v; want %q", db, got, err, want)
		}
	}
	for _, db := range []string{"mysql://h/d", "postgres:h", "dbname=x"} {
		if _, err := config.ParseDB(db); err == nil {
			t.Errorf("ParseDB(%q) takes it", db)
		}
	}
}

func TestParse_EnvThenFlags_Checked(t *testing.T) {
	t.Setenv("PAYMENTSD_LISTEN", "127.0.0.1:1")
	t.Setenv("PAYMENTSD_DB_POOL", "3")
	c := config.Default()
	if err := c.Parse([]string{"--db-pool", "4"}); err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:1" || c.DBPool != 4 {
		t.Errorf("Listen %q, DBPool %d: want the variable's, then the flag's", c.Listen, c.DBPool)
	}
	c = config.Default()
	if err := c.Parse([]string{"--lease", "0s"}); err == nil {
		t.Error("Parse does not check")
	}
	if err := c.Parse([]string{"extra"}); err == nil || err.Error() != `unexpected arguments ["extra"]` {
		t.Errorf("an operand: %v", err)
	}
	t.Setenv("PAYMENTSD_DB", "")
	if err := c.Parse(nil); err == nil {
		t.Error("an empty PAYMENTSD_DB is taken")
	}
}

// --db-pool, when given, is at least 1; not given, it is 0, which leaves
// the size to the URL's pool_max_conns, else 20.
func TestParse_DBPool(t *testing.T) {
	for _, pool := range []string{"0", "-2", "x"} {
		c := config.Default()
		if err := c.Parse([]string{"--db-pool", pool}); err == nil || !strings.Contains(err.Error(), "at least 1") {
			t.Errorf("--db-pool %s: %v", pool, err)
		}
	}
	if c := config.Default(); c.Parse(nil) != nil || c.DBPool != 0 {
		t.Errorf("no --db-pool: DBPool %d, want 0", c.DBPool)
	}
}

func TestParse_Help(t *testing.T) {
	c := config.Default()
	if err := c.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestSharedDefaults_OnlyTheServersFlags(t *testing.T) {
	t.Setenv("PAYMENTSD_DB", "from-env.db")
	t.Setenv("PAYMENTSD_TLS_CERT", "cert.pem") // the server's alone: not refused
	fs := flag.NewFlagSet("paymentsd backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := fs.String("db", "default.db", "")
	json := fs.Bool("json", false, "")
	t.Setenv("PAYMENTSD_JSON", "true") // no server flag: not read
	if err := config.SharedDefaults(fs); err != nil {
		t.Fatal(err)
	}
	if *db != "from-env.db" || *json {
		t.Errorf("db %q, json %t: want from-env.db, false", *db, *json)
	}
}

// Reflection answers anyone: unsaid, it is served in dev mode alone. Said,
// by flag or variable, it is what was said.
func TestParse_Reflection_OnInDevModeUnlessSaid(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "api-keys")
	for _, c := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", true},
		{[]string{"--reflection=false"}, "", false},
		{[]string{"--api-keys", keys}, "", false},
		{[]string{"--api-keys", keys, "--reflection"}, "", true},
		{[]string{"--api-keys", keys}, "true", true},
		{nil, "false", false},
	} {
		t.Run(strings.Join(c.args, " ")+" env="+c.env, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("PAYMENTSD_REFLECTION", c.env)
			}
			cfg := config.Default()
			if err := cfg.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if got := cfg.ServesReflection(); got != c.want {
				t.Errorf("ServesReflection() = %v, want %v", got, c.want)
			}
		})
	}
	if cfg := config.Default(); cfg.Parse([]string{"--reflection=maybe"}) == nil {
		t.Error("--reflection=maybe taken")
	}
}
