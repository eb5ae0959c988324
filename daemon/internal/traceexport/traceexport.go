// Package traceexport exports the spans of a gRPC server and its HTTP face
// over OTLP/gRPC. It does so when the standard OpenTelemetry environment
// asks for it. When it does not, it costs nothing per call.
package traceexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/daemon/internal/version"
)

// shutdownTimeout bounds the flush of the last spans at Shutdown. A
// collector that is down thus cannot hold up shutdown.
const shutdownTimeout = 5 * time.Second

// Exporter exports the server's spans over OTLP/gRPC. A nil *Exporter is
// tracing off, and all its methods work on it.
type Exporter struct {
	provider *sdktrace.TracerProvider
}

// Enabled reports whether the standard OpenTelemetry environment asks for
// spans to be exported. It does when an OTLP endpoint is set, and the SDK
// and the traces exporter are not turned off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Start starts exporting spans if the environment asks for it (see
// Enabled), and returns nil otherwise. Then nothing is dialed and no stats
// handler is installed, so tracing off costs nothing per call. The
// exporter reads the rest of the standard OTEL_EXPORTER_OTLP_* variables:
// headers, TLS, compression and timeout. The batch processor reads
// OTEL_BSP_*, and the sampler OTEL_TRACES_SAMPLER. The resource reads
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. They win over the default
// service.name, paymentsd, and service.version, the release
// (version.Version).
func Start(ctx context.Context, logger *slog.Logger) (*Exporter, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("paymentsd"), semconv.ServiceVersion(version.Version)),
		resource.WithFromEnv(), // last, so that it wins
	)
	if errors.Is(err, resource.ErrPartialResource) {
		// A malformed OTEL_RESOURCE_ATTRIBUTES is no reason not to serve.
		logger.Warn("tracing: resource partly detected", "err", err)
	} else if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The client does not dial until the first export, and keeps trying in
	// the background. A collector that is down never delays startup.
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	logger.Info("tracing: exporting spans over OTLP/gRPC")
	return &Exporter{provider: provider}, nil
}

// ServerOption is the stats handler that starts a span for each call. With
// tracing off, it is no option at all. The provider and propagator are
// passed rather than made global. So two Mains in one process, as in the
// tests, each trace to their own. Incoming calls continue a W3C
// traceparent. Metrics stay with Prometheus, so otelgrpc's are no-ops.
// Health checks, which load balancers send every few seconds, get no spans,
// since they would drown the calls. Nor do reflection's streams, tools'
// questions about the API.
func (t *Exporter) ServerOption() grpc.ServerOption {
	if t == nil {
		return grpc.EmptyServerOption{}
	}
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.Any(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection.")))),
	))
}

// HTTPHandler wraps h, an HTTP server's handler, so each request gets a
// server span that continues a W3C traceparent. The spans of what it calls
// with the request's context are its children. With tracing off, it
// returns h. As for gRPC, metrics stay with Prometheus.
func (t *Exporter) HTTPHandler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// Shutdown exports the spans still buffered and stops the exporter. Its
// failure, as when the collector is down, is logged, not returned. The
// data is safe, and an exit status is no place for lost spans.
func (t *Exporter) Shutdown(logger *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		logger.Warn("tracing: flushing the last spans failed", "err", err)
	}
}
