// Package config is paymentsd's configuration. It holds the server's
// flags, their defaults and the PAYMENTSD_ variables that set them. It
// checks a configuration before anything is bound or opened.
package config

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/internal/envflags"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// Config is paymentsd's configuration, one field per flag.
type Config struct {
	Listen string
	DB     string // a bbolt file's path, or a postgres:// URL
	DBPool int    // PostgreSQL connections; 0: the URL's pool_max_conns, else 20
	// PodsPath names the pods file: several PostgreSQL databases, in
	// place of --db, each principal placed on one. It needs PlacementEtcd.
	PodsPath string
	// PlacementEtcd is the etcd client URLs, comma-separated, of the
	// directory of where each principal lives.
	PlacementEtcd string
	// PlacementPrefix is the directory's etcd key prefix.
	PlacementPrefix string
	Lease           time.Duration
	TTL             time.Duration
	APIKeysPath     string
	SweepInterval   time.Duration
	ShutdownGrace   time.Duration
	InFlightWait    time.Duration
	HandlerTimeout  time.Duration
	MetricsListen   string
	HTTPListen      string
	TLSCert         string
	TLSKey          string
	TLSClientCA     string
	TLSClientCRL    string
	PrincipalFrom   string
	// AdminListen serves the operator console; empty serves none.
	AdminListen string
	// AdminKeysPath is the operators' credentials, in the --api-keys
	// format; the console needs it, as it answers no one else.
	AdminKeysPath string
	// Dev serves dev mode, any bearer token accepted, on non-loopback
	// addresses too; without it dev mode binds loopback only.
	Dev bool
	// MetricsTokenPath names the file of the bearer token /metrics
	// requires; empty requires none.
	MetricsTokenPath string
	// Reflection serves the gRPC reflection service when set; unset (nil),
	// it is served in dev mode only (see ServesReflection).
	Reflection *bool
	// Limits bound what clients can hold: connections, calls, header
	// blocks.
	Limits Limits
	// WithoutIdempotency leaves the idempotency interceptor out, to
	// measure what it costs. No flag sets it: the benchmark build does.
	WithoutIdempotency bool
	// WithoutLimits leaves Limits unenforced, grpc-go's defaults in
	// force, to measure what they cost. No flag sets it: a benchmark
	// build does.
	WithoutLimits bool
}

// Default is the configuration of a server given no flags.
func Default() Config {
	return Config{
		Listen:          "localhost:50051",
		DB:              filepath.Join("data", "paymentsd.db"),
		PlacementPrefix: "/paymentsd/",
		Lease:           once.DefaultLease,
		TTL:             once.DefaultTTL,
		SweepInterval:   time.Minute,
		ShutdownGrace:   30 * time.Second,
		HandlerTimeout:  once.DefaultHandlerTimeout,
		HTTPListen:      "localhost:8080",
		PrincipalFrom:   "bearer",
		Limits:          DefaultLimits(),
	}
}

// Limits bound what a client can hold before it has proved who it is.
type Limits struct {
	MaxConnections     int           // per listener: gRPC, HTTP
	MaxCalls           int           // gRPC calls in progress, the HTTP face's among them
	MaxStreams         uint32        // calls in progress on one gRPC connection
	MaxHeaderBytes     uint32        // a gRPC call's header list, as the HTTP face's
	HeaderTimeout      time.Duration // to receive a complete gRPC header block
	KeepaliveMinTime   time.Duration // the shortest interval between a client's pings
	KeepaliveNoStream  bool          // pings allowed with no call in progress
	KeepaliveInterval  time.Duration // the server pings a connection quiet this long
	KeepaliveTimeout   time.Duration // and closes it if no answer comes within this
	MaxConnectionIdle  time.Duration // a gRPC connection without calls is closed after this
	MaxConnectionAge   time.Duration // a gRPC connection is asked to go away after this
	MaxConnectionGrace time.Duration // and then closed, calls or not, after this
	MaxUnreadPerConn   int64         // bytes of gRPC answers one connection leaves unread
	MaxUnread          int64         // bytes of gRPC answers all connections leave unread
	UnreadGrace        time.Duration // how long a connection may stay over its bound
	WriteTimeout       time.Duration // to write an HTTP answer, from its first byte
	MaxAnonymousCalls  int           // gRPC calls in progress that need no credential
}

// DefaultLimits hold on the deployment files' limits: a 512 MiB memory
// limit and 20,000 file descriptors.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:     4096,
		MaxCalls:           1024,
		MaxStreams:         256,
		MaxHeaderBytes:     64 << 10,
		HeaderTimeout:      10 * time.Second,
		KeepaliveMinTime:   10 * time.Second,
		KeepaliveNoStream:  true,
		KeepaliveInterval:  time.Minute,
		KeepaliveTimeout:   20 * time.Second,
		MaxConnectionIdle:  5 * time.Minute,
		MaxConnectionAge:   30 * time.Minute,
		MaxConnectionGrace: 30 * time.Second,
		MaxUnreadPerConn:   4 << 20,
		MaxUnread:          32 << 20,
		UnreadGrace:        10 * time.Second,
		WriteTimeout:       30 * time.Second,
		MaxAnonymousCalls:  128,
	}
}

// defineFlags defines the limits' flags on fs.
func (l *Limits) defineFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections, "open connections per listener (gRPC, HTTP; the metrics and console listeners take 64 each); when full, a new connection closes the one idle longest, and is refused only when all have calls in progress")
	fs.IntVar(&l.MaxCalls, "max-calls", l.MaxCalls, "gRPC calls in progress at once, the HTTP face's among them; one more is refused with UNAVAILABLE before it is read")
	fs.Var((*uint32Flag)(&l.MaxStreams), "grpc-max-concurrent-streams", "gRPC calls in progress on one connection; more are refused with REFUSED_STREAM, which clients retry")
	fs.Var((*uint32Flag)(&l.MaxHeaderBytes), "grpc-max-header-bytes", "bytes of a gRPC call's header list, as the HTTP face's 64 KiB; a longer list closes its connection")
	fs.DurationVar(&l.HeaderTimeout, "grpc-header-timeout", l.HeaderTimeout, "how long a gRPC client may take to finish a header block it began; then its connection is closed")
	fs.DurationVar(&l.KeepaliveMinTime, "grpc-keepalive-min-time", l.KeepaliveMinTime, "the shortest interval a client may ping at; one that pings more often is sent GOAWAY")
	fs.BoolVar(&l.KeepaliveNoStream, "grpc-keepalive-permit-without-stream", l.KeepaliveNoStream, "let clients ping while they have no call in progress (pings do not keep a connection from --grpc-max-connection-idle)")
	fs.DurationVar(&l.KeepaliveInterval, "grpc-keepalive-interval", l.KeepaliveInterval, "how long a gRPC connection may be quiet before the server pings it")
	fs.DurationVar(&l.KeepaliveTimeout, "grpc-keepalive-timeout", l.KeepaliveTimeout, "how long the server waits for a ping's answer before closing the connection")
	fs.DurationVar(&l.MaxConnectionIdle, "grpc-max-connection-idle", l.MaxConnectionIdle, "how long a gRPC connection may go without a call before it is closed (GOAWAY; clients reconnect when they next call)")
	fs.DurationVar(&l.MaxConnectionAge, "grpc-max-connection-age", l.MaxConnectionAge, "how long a gRPC connection may live (±10%) before it is asked to go away, so that long-lived clients rebalance across replicas")
	fs.DurationVar(&l.MaxConnectionGrace, "grpc-max-connection-age-grace", l.MaxConnectionGrace, "how long calls in progress on a connection past its age may take before it is closed")
	fs.Int64Var(&l.MaxUnreadPerConn, "grpc-max-unread-bytes-per-connection", l.MaxUnreadPerConn, "bytes of answers one gRPC connection may leave unread (waiting for its client's flow-control window); past them its new calls get RESOURCE_EXHAUSTED, and past --grpc-unread-grace it is closed")
	fs.Int64Var(&l.MaxUnread, "grpc-max-unread-bytes", l.MaxUnread, "bytes of answers all gRPC connections may leave unread; past them the connection leaving most is closed")
	fs.DurationVar(&l.UnreadGrace, "grpc-unread-grace", l.UnreadGrace, "how long a gRPC connection may leave more than --grpc-max-unread-bytes-per-connection unread before it is closed")
	fs.IntVar(&l.MaxAnonymousCalls, "max-anonymous-calls", l.MaxAnonymousCalls, "of --max-calls, the gRPC calls that need no credential (health checks, reflection) in progress at once; more are refused with UNAVAILABLE")
	fs.DurationVar(&l.WriteTimeout, "http-write-timeout", l.WriteTimeout, "how long an HTTP answer (the HTTP face's, /metrics, the console's) may take to write, from its first byte; a client that reads slower has its connection closed")
}

// check refuses a limit out of range, naming its flag.
func (l *Limits) check() error {
	for _, d := range []struct {
		flag string
		ok   bool
		want string
		got  any
	}{
		{"--max-connections", l.MaxConnections >= 1, "at least 1", l.MaxConnections},
		{"--max-calls", l.MaxCalls >= 1, "at least 1", l.MaxCalls},
		{"--grpc-max-concurrent-streams", l.MaxStreams >= 1, "at least 1", l.MaxStreams},
		{"--grpc-max-header-bytes", l.MaxHeaderBytes >= 1024, "at least 1024", l.MaxHeaderBytes},
		{"--grpc-header-timeout", l.HeaderTimeout > 0, "positive", l.HeaderTimeout},
		{"--grpc-keepalive-min-time", l.KeepaliveMinTime > 0, "positive", l.KeepaliveMinTime},
		{"--grpc-keepalive-interval", l.KeepaliveInterval > 0, "positive", l.KeepaliveInterval},
		{"--grpc-keepalive-timeout", l.KeepaliveTimeout > 0, "positive", l.KeepaliveTimeout},
		{"--grpc-max-connection-idle", l.MaxConnectionIdle > 0, "positive", l.MaxConnectionIdle},
		{"--grpc-max-connection-age", l.MaxConnectionAge > 0, "positive", l.MaxConnectionAge},
		{"--grpc-max-connection-age-grace", l.MaxConnectionGrace >= 0, "0 or more", l.MaxConnectionGrace},
		{"--grpc-max-unread-bytes-per-connection", l.MaxUnreadPerConn >= 64<<10, "at least 65536, an HTTP/2 window", l.MaxUnreadPerConn},
		{"--grpc-max-unread-bytes", l.MaxUnread >= l.MaxUnreadPerConn, "at least --grpc-max-unread-bytes-per-connection", l.MaxUnread},
		{"--grpc-unread-grace", l.UnreadGrace > 0, "positive", l.UnreadGrace},
		{"--http-write-timeout", l.WriteTimeout > 0, "positive", l.WriteTimeout},
		{"--max-anonymous-calls", l.MaxAnonymousCalls >= 1 && l.MaxAnonymousCalls <= l.MaxCalls, "1 to --max-calls", l.MaxAnonymousCalls},
	} {
		if !d.ok {
			return fmt.Errorf("%s must be %s, got %v", d.flag, d.want, d.got)
		}
	}
	return nil
}

// ServesReflection reports whether the server serves gRPC reflection. It
// does when --reflection says so. Unsaid, it does in dev mode alone: it
// answers anyone, and a server that requires credentials need not list
// its API to strangers (grpcurl reads the proto files instead).
func (c *Config) ServesReflection() bool {
	if c.Reflection != nil {
		return *c.Reflection
	}
	return c.Open()
}

// optionalBool is a boolean flag that may be left unset (nil).
type optionalBool struct{ v **bool }

func (b optionalBool) String() string {
	if b.v == nil || *b.v == nil {
		return ""
	}
	return strconv.FormatBool(**b.v)
}

func (b optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("must be true or false, got %q", s)
	}
	*b.v = &v
	return nil
}

func (b optionalBool) IsBoolFlag() bool { return true }

// uint32Flag is a flag of a positive 32-bit count.
type uint32Flag uint32

func (u *uint32Flag) String() string {
	if u == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*u), 10)
}

func (u *uint32Flag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("must be a count, 0 to %d, got %q", uint32(1<<32-1), s)
	}
	*u = uint32Flag(n)
	return nil
}

// Parse reads the environment, then args (which win), into c, and checks
// the result. It returns flag.ErrHelp after -h, the usage printed.
func (c *Config) Parse(args []string) error {
	fs := flag.NewFlagSet("paymentsd", flag.ContinueOnError)
	c.DefineFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Flags of the server (paymentsd [flags]):\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s\n", EnvHelp)
	}
	if err := env.Defaults(fs, nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c.Check()
}

// DefineFlags defines the server's flags on fs, into c, c's values their
// defaults.
func (c *Config) DefineFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "gRPC listen address")
	fs.StringVar(&c.DB, "db", c.DB, "where the data lives: a bbolt file (created 0600, its directory 0700), or a PostgreSQL database as a postgres:// or postgresql:// URL (the libpq environment variables, PGPASSWORD and the like, fill in what it leaves out)")
	fs.Var((*poolSize)(&c.DBPool), "db-pool", "PostgreSQL `connections` of this process; each call in progress under the idempotency interceptor holds one (default: the URL's pool_max_conns, else 20)")
	fs.StringVar(&c.PodsPath, "pods", c.PodsPath, `file of several PostgreSQL databases ("pods"), one "<name> <postgres:// URL>" per line, in place of --db: each principal's records and intents live in one pod, placed on its first call and kept in --placement-etcd's directory; --db-pool is per pod`)
	fs.StringVar(&c.PlacementEtcd, "placement-etcd", c.PlacementEtcd, "with --pods, required: the etcd client URLs, comma-separated, of the directory of where each principal lives (http://host:2379,...)")
	fs.StringVar(&c.PlacementPrefix, "placement-prefix", c.PlacementPrefix, "with --pods: the directory's etcd key prefix, ending with /; replicas of one service share it")
	fs.DurationVar(&c.Lease, "lease", c.Lease, "how long a claimed idempotency key waits for its handler before a retry may take it over")
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "how long an idempotency record lives; after it the key runs fresh")
	fs.StringVar(&c.APIKeysPath, "api-keys", c.APIKeysPath, `file of accepted credentials, one "<principal> sha256:<hex of the token's SHA-256>" per line; without it, dev mode accepts any token`)
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "how often expired idempotency records are deleted")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long shutdown waits for calls in progress")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "address to serve Prometheus metrics on, at /metrics; empty serves none")
	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen, "address to serve the HTTP/JSON API on (the same calls, records and rules as gRPC); empty serves none")
	fs.DurationVar(&c.HandlerTimeout, "handler-timeout", c.HandlerTimeout, "how long a claimed request may run; it runs to its end even if its caller has gone, so that the retry finds its result")
	fs.DurationVar(&c.InFlightWait, "in-flight-wait", c.InFlightWait, "how long a duplicate of a request in flight waits for its result instead of getting ABORTED; 0 answers at once")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate chain: serve TLS on the gRPC, HTTP and metrics listeners; read again when it changes or on SIGHUP")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key of --tls-cert; group and others may not write it")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM CAs: require client certificates they sign on the gRPC and HTTP listeners (mutual TLS)")
	fs.StringVar(&c.TLSClientCRL, "tls-client-crl", c.TLSClientCRL, "PEM or DER CRLs, signed by --tls-client-ca's CAs: client certificates they list are refused at the handshake and, on open connections, at their next call; read again when it changes or on SIGHUP")
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen, "address to serve the operator console on (a web page and its JSON API to look keys up, list those in flight and release them; TLS with --tls-cert); empty, the default, serves none")
	fs.StringVar(&c.AdminKeysPath, "admin-keys", c.AdminKeysPath, `with --admin-listen, required: file of operators' credentials, in the --api-keys format, the names being operators'; read again when it changes or on SIGHUP`)
	fs.BoolVar(&c.Dev, "dev", c.Dev, "dev mode on any address: without --api-keys any bearer token is accepted as a principal of its own, which paymentsd serves on loopback addresses only unless this is given")
	fs.StringVar(&c.MetricsTokenPath, "metrics-token-file", c.MetricsTokenPath, "file holding the bearer token that /metrics requires (a Prometheus scrape config's authorization credentials_file); /healthz stays open; read again when it changes or on SIGHUP")
	fs.Var(optionalBool{&c.Reflection}, "reflection", "serve gRPC server reflection, which lists the services and their messages to any caller, without a credential (grpcurl uses it); default: on in dev mode, off when credentials are required")
	c.Limits.defineFlags(fs)
	fs.StringVar(&c.PrincipalFrom, "principal-from", c.PrincipalFrom, "where a caller's principal, which owns its intents and idempotency keys, comes from: bearer (the token, as --api-keys lists it), cert (the client certificate's URI SAN, else its first DNS SAN) or either (the token when one is sent, else the certificate)")
}

// Check refuses a configuration the server cannot serve by, saying which
// flag is wrong. It returns the first refusal found.
func (c *Config) Check() error {
	switch _, dbErr := ParseDB(c.DB); {
	case c.DB == "":
		return errors.New(NoDB)
	case dbErr != nil:
		return dbErr
	case c.Listen == "":
		return errors.New("--listen must name an address (host:port)")
	case c.Lease <= 0 || c.TTL <= c.Lease || c.TTL > storage.MaxTTL:
		return fmt.Errorf("need 0 < --lease < --ttl <= %v, got %v and %v", storage.MaxTTL, c.Lease, c.TTL)
	case c.SweepInterval <= 0:
		return fmt.Errorf("--sweep-interval must be positive, got %v", c.SweepInterval)
	case c.InFlightWait < 0:
		return fmt.Errorf("--in-flight-wait must not be negative, got %v", c.InFlightWait)
	case c.HandlerTimeout <= 0:
		return fmt.Errorf("--handler-timeout must be positive, got %v", c.HandlerTimeout)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("--shutdown-grace must not be negative, got %v", c.ShutdownGrace)
	case c.DBPool < 0:
		return fmt.Errorf("--db-pool must be at least 1, got %d", c.DBPool)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first")
	case c.TLSClientCRL != "" && c.TLSClientCA == "":
		return errors.New("--tls-client-crl needs --tls-client-ca: it revokes client certificates those CAs signed")
	case c.AdminListen != "" && c.AdminKeysPath == "":
		return errors.New("--admin-listen needs --admin-keys: the console answers operators only")
	case c.AdminKeysPath != "" && c.AdminListen == "":
		return errors.New("--admin-keys has no use without --admin-listen, which serves the console")
	case c.AdminKeysPath != "" && filepath.Clean(c.AdminKeysPath) == filepath.Clean(c.APIKeysPath):
		return errors.New("--admin-keys and --api-keys name the same file: a customer's token must not be an operator's")
	}
	if err := c.checkPods(); err != nil {
		return err
	}
	if err := c.Limits.check(); err != nil {
		return err
	}
	if c.MetricsTokenPath != "" && c.MetricsListen == "" {
		return errors.New("--metrics-token-file has no use without --metrics-listen, which serves /metrics")
	}
	source, err := auth.ParseSource(c.PrincipalFrom)
	switch {
	case err != nil:
		return fmt.Errorf("--principal-from: %w", err)
	case source != auth.FromBearer && c.TLSClientCA == "":
		return fmt.Errorf("--principal-from %s needs --tls-client-ca: principals from certificates need certificates verified", source)
	case source == auth.FromCert && c.APIKeysPath != "":
		return errors.New("--api-keys has no use with --principal-from cert, which reads no token: drop it, or use --principal-from either")
	}
	return c.checkExposure()
}

// checkPods refuses --pods without its directory, and the reverse. The
// pods file itself is read when the server opens its databases.
func (c *Config) checkPods() error {
	switch {
	case c.PodsPath != "" && c.PlacementEtcd == "":
		return errors.New("--pods needs --placement-etcd: the directory of where each principal lives")
	case c.PodsPath == "" && c.PlacementEtcd != "":
		return errors.New("--placement-etcd has no use without --pods, the databases it places principals on")
	case c.PodsPath != "" && c.DB != Default().DB:
		return errors.New("--pods and --db both name where the data lives: give one")
	case c.PodsPath != "" && !strings.HasSuffix(c.PlacementPrefix, "/"):
		return fmt.Errorf("--placement-prefix must end with /, got %q", c.PlacementPrefix)
	}
	return nil
}

// Etcd is --placement-etcd's endpoints.
func (c *Config) Etcd() []string {
	var eps []string
	for _, e := range strings.Split(c.PlacementEtcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// poolSize is --db-pool: at least 1 when given; 0, unset, leaves the size
// to the URL's pool_max_conns, else 20.
type poolSize int

func (p *poolSize) String() string {
	if p == nil || *p == 0 {
		return ""
	}
	return strconv.Itoa(int(*p))
}

func (p *poolSize) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("must be a number of connections, at least 1, got %q", s)
	}
	*p = poolSize(n)
	return nil
}

// NoDB is the refusal of an empty --db.
const NoDB = "--db must name a data file or a postgres:// URL"

// badDB is the refusal of a --db that reads as a connection string
// paymentsd does not take. It never repeats the value, which may hold a
// password.
const badDB = "--db must be a bbolt file's path, or a PostgreSQL URL starting postgres:// or postgresql://; " +
	"other connection strings (key=value, other URL schemes) are not taken, rather than made a file of that name"

// ParseDB classifies --db. A URL whose scheme is postgres or postgresql,
// in any case, is PostgreSQL. It is returned with its scheme lower-cased,
// as pgx matches it. Another connection string is refused: one with
// "://", "postgres:" or "=" in it. Taken as a file, it would start an
// empty store of its own, its name holding the password. Anything else is
// a bbolt file's path, and pgURL is "".
func ParseDB(db string) (pgURL string, err error) {
	lower := strings.ToLower(db)
	scheme, rest, isURL := strings.Cut(db, "://")
	switch s := strings.ToLower(scheme); {
	case isURL && (s == "postgres" || s == "postgresql"):
		return s + "://" + rest, nil
	case isURL || strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") || strings.Contains(db, "="):
		return "", errors.New(badDB)
	}
	return "", nil
}

// EnvHelp is what help says of the environment.
const EnvHelp = `Every flag of the server can also be set in the environment as
PAYMENTSD_<FLAG>, upper case with dashes as underscores (--api-keys is
PAYMENTSD_API_KEYS, --tls-client-ca PAYMENTSD_TLS_CLIENT_CA); a flag given
on the command line wins. The operator subcommands read the variables of
the flags they share with the server (PAYMENTSD_DB, PAYMENTSD_API_KEYS).
A variable set but empty is refused (unset it for the default), except
PAYMENTSD_HTTP_LISTEN, PAYMENTSD_METRICS_LISTEN and PAYMENTSD_ADMIN_LISTEN,
where empty serves none. A PAYMENTSD_ variable that names no setting but
is within two edits of one is refused too: it is most likely misspelled.`

// env is paymentsd's: an empty listen address serves none.
var env = envflags.Env{Prefix: "PAYMENTSD_", EmptyMeansNone: map[string]bool{"http-listen": true, "metrics-listen": true, "admin-listen": true}}

// SharedDefaults sets those of fs's flags that the server has too from
// the environment. The command line comes after, and wins. An operator
// command thus finds the server's PAYMENTSD_DB. It is not refused a
// variable that is the server's alone.
func SharedDefaults(fs *flag.FlagSet) error {
	names := map[string]bool{}
	server := flag.NewFlagSet("", flag.ContinueOnError)
	c := Default()
	c.DefineFlags(server)
	server.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return env.Defaults(fs, names)
}
