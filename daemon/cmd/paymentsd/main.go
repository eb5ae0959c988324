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
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	embedded "github.com/paymentsd/paymentsd/daemon"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/credfiles"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/internal/grpcreflect"
	"github.com/paymentsd/paymentsd/daemon/internal/grpcslog"
	"github.com/paymentsd/paymentsd/daemon/internal/memlimit"
	"github.com/paymentsd/paymentsd/daemon/internal/traceexport"
	"github.com/paymentsd/paymentsd/daemon/listeners"
	"github.com/paymentsd/paymentsd/daemon/prom"
	"github.com/paymentsd/paymentsd/daemon/rpclog"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/daemon/server/strictcodec"
	"github.com/paymentsd/paymentsd/daemon/storehealth"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/tracing"
	"github.com/paymentsd/paymentsd/metrics"
	"github.com/paymentsd/paymentsd/storage"
)

func main() {
	if code, ok := program.Run(&cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Args[1:]); ok { // record, backup, ...
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := NewMain(os.Stderr)
	grpcslog.Install(m.Logger) // before any gRPC use: grpc-go's lines as JSON too
	// SIGHUP reads the credential files again. It is caught from the
	// start: one sent while the server starts is read once it serves,
	// never fatal.
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
		var bad *credfiles.ConfigError
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

// Main is the program: ParseFlags, then Run, then Close. Tests run it in
// the same way as main does.
type Main struct {
	Config config.Config
	Logger *slog.Logger

	db      intents.Backend
	grpc    *grpc.Server
	lis     *listeners.Set // every address bound, behind its limits
	health  *health.Server
	prom    *prom.Prom       // nil without --metrics-listen
	metrics *metrics.Metrics // the interceptor's, in prom
	http    *http.Server     // serves the metrics
	stop    context.CancelFunc
	wg      sync.WaitGroup
	tracing *traceexport.Exporter  // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	creds   *credfiles.Credentials // the API keys and the TLS files in use
	hup     chan os.Signal         // SIGHUP: read the credential files again
	admin   *boltadmin.Server      // the admin socket; nil for PostgreSQL
	console *http.Server           // the operator console; nil without --admin-listen
}

// NewMain returns a Main with the default configuration, logging to w.
func NewMain(w io.Writer) *Main {
	c := config.Default()
	c.WithoutIdempotency, c.WithoutLimits = benchBaseline, benchNoLimits
	return &Main{Config: c, Logger: slog.New(slog.NewJSONHandler(w, nil))}
}

// ParseFlags reads the environment and the command line into m.Config.
func (m *Main) ParseFlags(args []string) error { return m.Config.Parse(args) }

// Run binds its addresses, opens the data file, starts serving and
// returns; the server runs until Close. Addresses come first, so that a
// bad one leaves no data file behind.
func (m *Main) Run(ctx context.Context) (err error) {
	if err := m.loadCredentials(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			m.abort()
		}
	}()
	if m.lis, err = listeners.Bind(m.Config, m.Logger); err != nil {
		return err
	}
	if m.db, err = openBackend(ctx, m.Config, m.Logger); err != nil {
		return err
	}
	if err := m.newGRPC(ctx); err != nil {
		return err
	}
	m.serve(ctx)
	return nil
}

// loadCredentials reads the credential files for the first time. SIGHUP
// is caught from before, so that one sent while the server starts is acted
// on once it serves, neither missed nor fatal.
func (m *Main) loadCredentials() (err error) {
	if m.hup == nil { // main catches it earlier still
		m.hup = make(chan os.Signal, 1)
		signal.Notify(m.hup, syscall.SIGHUP)
	}
	c := m.Config
	m.creds, err = credfiles.Load(credfiles.Config{APIKeys: c.APIKeysPath, PrincipalFrom: c.PrincipalFrom,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSClientCA, TLSClientCRL: c.TLSClientCRL, AdminKeys: c.AdminKeysPath,
		MetricsToken: c.MetricsTokenPath}, m.Logger)
	if err != nil {
		signal.Stop(m.hup)
	}
	return err
}

// abort undoes what a Run that failed did.
func (m *Main) abort() {
	signal.Stop(m.hup)
	if m.lis != nil {
		m.lis.Close()
	}
	if m.db != nil {
		m.db.Close()
	}
}

// paymentsService is the service paymentsd serves.
var paymentsService = protoreflect.FullName(paymentsv1.PaymentIntentService_ServiceDesc.ServiceName)

// newGRPC makes the gRPC server with its interceptors, tracing and
// services. The interceptors run in this order: the call limit's, the
// metrics', the log's, the codec's, authentication, idempotency.
func (m *Main) newGRPC(ctx context.Context) (err error) {
	var interceptors []grpc.UnaryServerInterceptor
	calls := m.lis.Limits.Calls // nil without limits
	if calls != nil {
		interceptors = append(interceptors, calls.UnaryServerInterceptor)
	}
	if m.Config.MetricsListen != "" {
		if m.prom, err = prom.New(m.db.CountRecords); err != nil {
			return err
		}
		m.metrics = m.prom.Idem
		if m.creds.TLS != nil {
			m.prom.WatchCertificate(m.creds.TLS)
			if m.Config.TLSClientCRL != "" {
				m.prom.WatchCRLs(m.creds.TLS)
			}
		}
		m.watchStore()
		if calls != nil {
			m.prom.WatchLimits(m.lis.Limits.Listeners, slices.Collect(maps.Values(m.lis.Limits.Refusals)), calls)
		}
		interceptors = append(interceptors, m.prom.GRPC.UnaryServerInterceptor())
	}
	authenticated := "/" + string(paymentsService) + "/"
	if calls := m.lis.Limits.Calls; calls != nil {
		calls.Anonymous(m.Config.Limits.MaxAnonymousCalls, authenticated)
	}
	interceptors = append(interceptors, rpclog.Interceptor(m.Logger), strictcodec.Reject,
		auth.UnaryServerInterceptor(m.creds.Authn, authenticated), rpclog.Identified)
	if !m.Config.WithoutIdempotency {
		interceptors = append(interceptors, m.idempotency())
	}
	if m.tracing, err = traceexport.Start(ctx, m.Logger); err != nil {
		return err
	}
	m.grpc = grpc.NewServer(append(m.lis.GRPCOptions(m.networkCredentials()),
		// A keyed call's response is sent as its record stores it: encoded
		// once, and a replay never decoded.
		grpc.ForceServerCodecV2(interceptor.Codec(strictcodec.New(paymentsService))),
		grpc.ChainUnaryInterceptor(interceptors...), m.tracing.ServerOption())...)
	paymentsv1.RegisterPaymentIntentServiceServer(m.grpc, server.New(m.db.Intents(), nil))
	m.health = health.NewServer()
	healthpb.RegisterHealthServer(m.grpc, m.health)
	if m.Config.ServesReflection() {
		if err := grpcreflect.Register(m.grpc, embedded.Descriptors); err != nil {
			return err
		}
	}
	for name := range m.grpc.GetServiceInfo() { // each service answers too, not only the server
		m.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	return nil
}

// watchStore exports what the store tells of itself: bbolt's group
// commit, a PostgreSQL pool, or each pod's.
func (m *Main) watchStore() {
	if c, ok := m.db.(interface{ CommitCounts() (uint64, uint64) }); ok {
		m.prom.WatchCommits(c.CommitCounts)
	}
	if p, ok := m.db.(prom.Postgres); ok {
		m.prom.WatchPostgres(p)
	}
	if p, ok := m.db.(prom.Pods); ok {
		m.prom.WatchPods(p)
	}
}

// idempotency is the idempotency interceptor, with paymentsd's methods'
// key policies.
func (m *Main) idempotency() grpc.UnaryServerInterceptor {
	return interceptor.MustUnaryServerInterceptor(m.db.Records(), // fixed options, tested
		interceptor.WithScope(auth.Scope),
		interceptor.WithLease(m.Config.Lease),
		interceptor.WithTTL(m.Config.TTL),
		interceptor.WithInFlightWait(m.Config.InFlightWait),
		interceptor.WithHandlerTimeout(m.Config.HandlerTimeout),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, interceptor.KeyRequired),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_CancelPaymentIntent_FullMethodName, interceptor.KeyOptional),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_GetPaymentIntent_FullMethodName, interceptor.KeyIgnored),
		interceptor.WithKeyPolicy(paymentsv1.PaymentIntentService_ListPaymentIntents_FullMethodName, interceptor.KeyIgnored),
		// Create and Cancel: their only effect is the intent they write
		// through the store (transactional.go; none in the robustness
		// suite's robustness_durable build).
		interceptor.WithTransactional(transactionalMethods...),
		interceptor.WithObserver(rpclog.Observer{Metrics: m.metrics}),
		interceptor.WithObserver(tracing.Observer{}),
		interceptor.WithLogger(m.Logger),
		interceptor.WithStoredBytes(),
	)
}

// serve starts serving: gRPC, the metrics, the sweeper, the health and
// credential watchers, the HTTP face, the admin socket and the console.
func (m *Main) serve(ctx context.Context) {
	if m.prom != nil {
		m.prom.GRPC.InitializeMetrics(m.grpc)
		m.serveMetrics(m.lis.Metrics)
	}
	m.creds.Log()
	if m.Config.Dev {
		m.Logger.Warn("--dev: any bearer token is served as a principal of its own, on every address listed; never in production",
			"exposed", m.Config.Exposed())
	}
	m.Logger.Info("paymentsd listening", "addr", m.lis.GRPC.Addr().String(), "db", m.db.String(),
		"lease", m.Config.Lease.String(), "ttl", m.Config.TTL.String(), "tls", m.creds.TLS != nil)

	ctx, m.stop = context.WithCancel(context.WithoutCancel(ctx))
	m.wg.Go(func() {
		if err := m.grpc.Serve(m.lis.GRPC); err != nil {
			m.Logger.Error("serve", "err", err)
		}
	})
	m.wg.Go(func() { memlimit.Follow(ctx, m.Logger, time.Second) })
	m.wg.Go(func() { storage.RunSweeper(ctx, m.db.Records(), m.Config.SweepInterval, m.swept) })
	m.wg.Go(func() { storehealth.Watch(ctx, m.health, m.healthCheck, m.Logger, storehealth.Interval) })
	context.AfterFunc(ctx, func() { signal.Stop(m.hup) })
	m.creds.Watch(ctx, &m.wg, m.hup, m.prom.Reloaded)
	m.serveHTTP()
	m.admin = m.serveAdmin() // nil for PostgreSQL
	m.serveConsole()
}

// healthCheck is the store's check, then the client CRLs'. While a CRL in
// force is past its nextUpdate, no client certificate is admitted, so
// paymentsd serves no one: it reports NOT_SERVING. The CRLs are enforced
// whatever the store's state.
func (m *Main) healthCheck(ctx context.Context) error {
	var crl error
	if m.creds.TLS != nil {
		crl = m.creds.TLS.EnforceCRL(time.Now())
	}
	if err := m.db.Check(ctx); err != nil {
		return err
	}
	if p, ok := m.db.(prom.Pods); ok {
		storehealth.SetPods(m.health, p.Health())
	}
	return crl
}

// networkCredentials are the gRPC server's on the network: TLS with ALPN
// h2 when --tls-cert is set, nil for plaintext otherwise. A connection a
// new CRL revokes is closed.
func (m *Main) networkCredentials() credentials.TransportCredentials {
	if m.creds.TLS == nil {
		return nil
	}
	return m.creds.TLS.Credentials(m.creds.ClientAuth())
}

// serveMetrics serves /metrics on lis, behind --metrics-token-file's token
// if one is set. It serves /healthz too, open to probes. That answers 200
// while the store serves and 503 otherwise, as grpc.health.v1 reports it.
func (m *Main) serveMetrics(lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.metricsAuth(m.prom.Handler()))
	mux.HandleFunc("/healthz", storehealth.Handler(m.health))
	m.http = m.lis.HTTPServer("metrics", mux)
	m.Logger.Info("metrics listening", "addr", lis.Addr().String(), "tls", m.creds.TLS != nil)
	if m.creds.TLS != nil {
		// Scrapers are not asked for a client certificate.
		lis = tls.NewListener(lis, m.creds.TLS.Config(tlsreload.NoClientCert, "h2", "http/1.1"))
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
// are cut off, and their callers get UNAVAILABLE. A transactional call's
// claim is dropped with its writes; another's is left to the orphan rule.
// Close then returns within the grace plus the commit in progress, if any.
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
	consoleStopped := m.shutdownConsole()
	m.grpc.GracefulStop()
	httpStopped()
	consoleStopped()
	if m.http != nil {
		m.http.Close()
	}
	m.wg.Wait()
	m.Logger.LogAttrs(context.Background(), slog.LevelInfo, "closed", m.db.ClosedAttrs()...)
	m.tracing.Shutdown(m.Logger) // every call has ended: its span is buffered
	return m.db.Close()
}
