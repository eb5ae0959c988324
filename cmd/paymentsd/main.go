// Command paymentsd serves payments.v1.PaymentIntentService over gRPC, with
// every CreatePaymentIntent run exactly once per idempotency key.
//
// Usage:
//
//	paymentsd [flags]
//
// Run paymentsd -h for the flags.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	idemtracing "github.com/paymentsd/paymentsd/interceptor/tracing"
	"github.com/paymentsd/paymentsd/internal/filewatch"
	"github.com/paymentsd/paymentsd/metrics"
	"github.com/paymentsd/paymentsd/server"
	"github.com/paymentsd/paymentsd/tlsreload"
)

func main() {
	if code, ok := runSubcommand(os.Args[1:]); ok { // record, backup, check, ...: see subcommands.go
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := NewMain(os.Stderr)
	// SIGHUP reads the credential files again; caught from the start, one
	// sent while the server starts is read once it serves, never fatal.
	m.hup = make(chan os.Signal, 1)
	signal.Notify(m.hup, syscall.SIGHUP)
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "paymentsd:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "paymentsd:", err)
		var bad *configFileError
		if errors.As(err, &bad) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	<-ctx.Done()
	stop() // a second signal kills at once
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "paymentsd:", err)
		os.Exit(1)
	}
}

// Config is paymentsd's configuration, one field per flag.
type Config struct {
	Listen         string
	DB             string // a bbolt file's path, or a postgres:// URL
	DBPool         int    // PostgreSQL connections
	Lease          time.Duration
	TTL            time.Duration
	APIKeysPath    string
	SweepInterval  time.Duration
	ShutdownGrace  time.Duration
	InFlightWait   time.Duration
	HandlerTimeout time.Duration
	MetricsListen  string
	HTTPListen     string
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
	PrincipalFrom  string
}

// Main is the program: ParseFlags, then Run, then Close. Tests run it in
// the same way as main does.
type Main struct {
	Config Config
	Logger *slog.Logger

	db       *backend
	grpc     *grpc.Server
	listener net.Listener
	health   *health.Server
	prom     *prom            // nil without --metrics-listen
	metrics  *metrics.Metrics // the interceptor's, in prom
	http     *http.Server     // serves the metrics
	stop     context.CancelFunc
	wg       sync.WaitGroup
	api      *httpAPI // the HTTP/JSON API; nil without --http-listen
	tracing  *tracing // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	authn    *auth.Authenticator
	tls      *tlsreload.Server  // nil without --tls-cert
	hup      chan os.Signal     // SIGHUP: read the credential files again
	keysFile *filewatch.Watcher // --api-keys; nil without
	tlsFiles *filewatch.Watcher // the --tls-* files; nil without
	admin    *boltadmin.Server  // the admin socket; nil for PostgreSQL
	// reloading serialises reloads: a watcher's and a SIGHUP's, each
	// reading then storing, could otherwise store the older file last.
	reloading sync.Mutex
}

// NewMain returns a Main with the default configuration, logging to w.
func NewMain(w io.Writer) *Main {
	return &Main{
		Config: Config{
			Listen:         "localhost:50051",
			DB:             filepath.Join("data", "paymentsd.db"),
			DBPool:         20,
			Lease:          interceptor.DefaultLease,
			TTL:            interceptor.DefaultTTL,
			SweepInterval:  time.Minute,
			ShutdownGrace:  30 * time.Second,
			HandlerTimeout: interceptor.DefaultHandlerTimeout,
			HTTPListen:     "localhost:8080",
			PrincipalFrom:  "bearer",
		},
		Logger: slog.New(slog.NewJSONHandler(w, nil)),
	}
}

// ParseFlags reads the command line into m.Config.
func (m *Main) ParseFlags(args []string) error {
	c := &m.Config
	fs := flag.NewFlagSet("paymentsd", flag.ContinueOnError)
	m.defineFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of paymentsd:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s\n", envHelp)
	}
	if err := defaultsFromEnv(fs, nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch _, dbErr := parseDB(c.DB); {
	case c.DB == "":
		return errors.New(noDB)
	case dbErr != nil:
		return dbErr
	case c.Listen == "":
		return errors.New("--listen must name an address (host:port)")
	case c.Lease <= 0 || c.TTL <= c.Lease:
		return fmt.Errorf("need 0 < --lease < --ttl, got %v and %v", c.Lease, c.TTL)
	case c.SweepInterval <= 0:
		return fmt.Errorf("--sweep-interval must be positive, got %v", c.SweepInterval)
	case c.InFlightWait < 0:
		return fmt.Errorf("--in-flight-wait must not be negative, got %v", c.InFlightWait)
	case c.HandlerTimeout <= 0:
		return fmt.Errorf("--handler-timeout must be positive, got %v", c.HandlerTimeout)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("--shutdown-grace must not be negative, got %v", c.ShutdownGrace)
	case c.DBPool < 1:
		return fmt.Errorf("--db-pool must be at least 1, got %d", c.DBPool)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first")
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
	return nil
}

// defineFlags defines the server's flags on fs, into m.Config.
func (m *Main) defineFlags(fs *flag.FlagSet) {
	c := &m.Config
	fs.StringVar(&c.Listen, "listen", c.Listen, "gRPC listen address")
	fs.StringVar(&c.DB, "db", c.DB, "where the data lives: a bbolt file (created 0600, its directory 0700), or a PostgreSQL database as a postgres:// or postgresql:// URL (the libpq environment variables, PGPASSWORD and the like, fill in what it leaves out)")
	fs.IntVar(&c.DBPool, "db-pool", c.DBPool, "PostgreSQL connections of this process; each call in progress under the idempotency interceptor holds one")
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
	fs.StringVar(&c.PrincipalFrom, "principal-from", c.PrincipalFrom, "where a caller's principal, which owns its intents and idempotency keys, comes from: bearer (the token, as --api-keys lists it), cert (the client certificate's URI SAN, else its first DNS SAN) or either (the token when one is sent, else the certificate)")
}

// Run binds its addresses, opens the data file, starts serving and
// returns; the server runs until Close. Addresses come first, so that a
// bad one leaves no data file behind.
func (m *Main) Run(ctx context.Context) (err error) {
	if err := m.loadCredentials(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			signal.Stop(m.hup)
		}
	}()
	var metricsListener net.Listener
	defer func() {
		if err != nil && m.listener != nil {
			m.listener.Close()
		}
		if err != nil && metricsListener != nil {
			metricsListener.Close()
		}
	}()
	if m.listener, err = net.Listen("tcp", m.Config.Listen); err != nil {
		return err
	}
	if m.Config.MetricsListen != "" {
		if metricsListener, err = net.Listen("tcp", m.Config.MetricsListen); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if m.api, err = listenHTTP(m.Config.HTTPListen); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			m.api.closeListener()
		}
	}()
	if m.db, err = openBackend(ctx, m.Config, m.Logger); err != nil {
		return err
	}

	codec := newRequestCodec(protoreflect.FullName(paymentsv1.PaymentIntentService_ServiceDesc.ServiceName))
	var interceptors []grpc.UnaryServerInterceptor
	if m.Config.MetricsListen != "" {
		if m.prom, err = newProm(m.db); err != nil {
			m.db.records.Close()
			return err
		}
		m.metrics = m.prom.idem
		if m.tls != nil {
			m.prom.watchCertificate(m.tls)
		}
		interceptors = append(interceptors, m.prom.grpc.UnaryServerInterceptor())
	}
	interceptors = append(interceptors,
		logRPC(m.Logger),
		rejectUndecodable,
		auth.UnaryServerInterceptor(m.authn, "/"+paymentsv1.PaymentIntentService_ServiceDesc.ServiceName+"/"),
	)
	if !benchWithoutIdempotency {
		interceptors = append(interceptors, interceptor.MustUnaryServerInterceptor(m.db.records, // fixed options, tested
			interceptor.WithScope(auth.Scope),
			interceptor.WithLease(m.Config.Lease),
			interceptor.WithTTL(m.Config.TTL),
			interceptor.WithInFlightWait(m.Config.InFlightWait),
			interceptor.WithHandlerTimeout(m.Config.HandlerTimeout),
			interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, interceptor.KeyRequired),
			interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName, interceptor.KeyOptional),
			interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, interceptor.KeyIgnored),
			interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_ListPaymentIntents_FullMethodName, interceptor.KeyIgnored),
			// Their only effect is the intent they write through the store.
			interceptor.WithTransactional(
				paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName,
				paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName,
			),
			interceptor.WithObserver(observer{m.metrics}),
			interceptor.WithObserver(idemtracing.Observer{}),
			interceptor.WithLogger(m.Logger),
		))
	}
	if m.tracing, err = startTracing(ctx, m.Logger); err != nil {
		m.db.records.Close()
		return err
	}
	m.grpc = grpc.NewServer(grpc.Creds(m.grpcCredentials()), grpc.ConnectionTimeout(handshakeTimeout), grpc.ForceServerCodecV2(codec), grpc.ChainUnaryInterceptor(interceptors...), m.tracing.serverOption())
	paymentsv1.RegisterPaymentIntentServiceServer(m.grpc, server.New(m.db.intents, nil))
	m.health = health.NewServer()
	healthpb.RegisterHealthServer(m.grpc, m.health)
	if err := registerReflection(m.grpc); err != nil {
		m.db.records.Close()
		return err
	}
	for name := range m.grpc.GetServiceInfo() { // each service answers too, not only the server
		m.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	if m.prom != nil {
		m.prom.grpc.InitializeMetrics(m.grpc)
		m.serveMetrics(metricsListener)
	}

	m.logCredentials()
	m.Logger.Info("paymentsd listening", "addr", m.listener.Addr().String(), "db", m.db.desc,
		"lease", m.Config.Lease.String(), "ttl", m.Config.TTL.String(), "tls", m.tls != nil)

	ctx, m.stop = context.WithCancel(context.WithoutCancel(ctx))
	m.wg.Go(func() {
		if err := m.grpc.Serve(m.listener); err != nil {
			m.Logger.Error("serve", "err", err)
		}
	})
	m.wg.Go(func() { storage.RunSweeper(ctx, m.db.records, m.Config.SweepInterval, m.swept) })
	m.wg.Go(func() { m.watchHealth(ctx) })
	m.watchCredentials(ctx)
	m.serveHTTP()
	m.admin = m.serveAdmin() // nil for PostgreSQL
	return nil
}

// handshakeTimeout bounds a new gRPC connection's handshake (TLS and the
// HTTP/2 preface), as ReadHeaderTimeout bounds the HTTP face's: a client
// that connects and says nothing holds nothing for long.
const handshakeTimeout = 10 * time.Second

// healthInterval is how often the store's health is looked at, and a
// store whose commits failed is probed.
const healthInterval = time.Second

// watchHealth reports the store's health on grpc.health.v1, for every
// service and the server as a whole: NOT_SERVING while the data file is
// damaged or its commits fail, or the database does not answer, so that a
// load balancer drains the instance, and SERVING again once a probe
// succeeds.
func (m *Main) watchHealth(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	var last error
	for {
		err := m.db.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if (err == nil) != (last == nil) {
			if err != nil {
				m.Logger.Error("store unhealthy: reporting NOT_SERVING", "err", err)
				m.health.Shutdown() // every service NOT_SERVING
			} else {
				m.Logger.Info("store healthy again: reporting SERVING")
				m.health.Resume()
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveMetrics serves /metrics on lis, and /healthz: 200 while the store
// serves, 503 otherwise, as grpc.health.v1 reports it.
func (m *Main) serveMetrics(lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.prom.handler())
	mux.HandleFunc("/healthz", m.healthz)
	m.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.Logger.Info("metrics listening", "addr", lis.Addr().String(), "tls", m.tls != nil)
	if m.tls != nil {
		// Scrapers are not asked for a client certificate.
		lis = tls.NewListener(lis, m.tls.Config(tlsreload.NoClientCert, "h2", "http/1.1"))
	}
	m.wg.Go(func() {
		if err := m.http.Serve(lis); err != http.ErrServerClosed {
			m.Logger.Error("serve metrics", "err", err)
		}
	})
}

// swept reports a sweep of expired idempotency records.
func (m *Main) swept(n int, err error) {
	if err != nil {
		m.Logger.Error("sweep expired idempotency records", "err", err)
	}
	if n > 0 {
		m.Logger.Info("swept expired idempotency records", "count", n)
		if m.metrics != nil {
			m.metrics.Swept(n)
		}
	}
}

// Close stops accepting calls, waits up to ShutdownGrace for those in
// progress, and closes the data file. Calls still running after the grace
// are cut off: their callers get UNAVAILABLE, a transactional call's claim
// is dropped with its writes, another's is left to the orphan rule. Close
// then returns within the grace plus the commit in progress, if any.
func (m *Main) Close() error {
	if m.grpc == nil {
		return nil
	}
	m.admin.Close() // first: a backup in progress must not hold the file open
	m.Logger.Info("shutting down", "grace", m.Config.ShutdownGrace.String())
	m.stop()            // the sweeper and the health watcher, which could report SERVING again
	m.health.Shutdown() // drain: load balancers stop sending
	timer := time.AfterFunc(m.Config.ShutdownGrace, m.grpc.Stop)
	defer timer.Stop()
	httpStopped := m.shutdownHTTP() // beside gRPC's, within the same grace
	m.grpc.GracefulStop()
	httpStopped()
	if m.http != nil {
		m.http.Close()
	}
	m.wg.Wait()
	m.Logger.LogAttrs(context.Background(), slog.LevelInfo, "closed", m.db.closedAttrs()...)
	m.tracing.shutdown(m.Logger) // every call has ended: its span is buffered
	return m.db.records.Close()
}

// benchWithoutIdempotency leaves the idempotency interceptor out. Only the
// benchmark build (tag benchbaseline) sets it, to measure what the
// interceptor costs; no flag of the real binary can.
var benchWithoutIdempotency = false
