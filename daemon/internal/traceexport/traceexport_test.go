package traceexport_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/daemon/internal/traceexport"
	"github.com/paymentsd/paymentsd/daemon/testkit/grpctest"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "paymentsd-eu"}, false},
	} {
		if got := traceexport.Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("Enabled(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

func TestStart_Off(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	e, err := traceexport.Start(context.Background(), slog.New(slog.DiscardHandler))
	if e != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil", e, err)
	}
	if _, ok := e.ServerOption().(grpc.EmptyServerOption); !ok {
		t.Error("tracing off installs a server option; want none")
	}
	e.Shutdown(slog.New(slog.DiscardHandler)) // does nothing, does not panic
}

// collector is an OTLP/gRPC collector that keeps the spans' names.
type collector struct {
	collectortracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *collector) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, s.Name+" "+service(rs))
			}
		}
	}
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

func service(rs *tracepb.ResourceSpans) string {
	for _, kv := range rs.GetResource().GetAttributes() {
		if kv.Key == "service.name" {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// A call gets a span, exported by Shutdown at the latest, as the service
// paymentsd; a health check gets none.
func TestStart_ExportsTheCallsSpans(t *testing.T) {
	col := &collector{}
	colServer := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(colServer, col)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+grpctest.Serve(t, colServer).Target())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")

	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	e, err := traceexport.Start(context.Background(), logger)
	if err != nil || e == nil {
		t.Fatalf("Start: %v, %v", e, err)
	}
	s := grpc.NewServer(e.ServerOption())
	healthpb.RegisterHealthServer(s, health.NewServer())
	collectortracepb.RegisterTraceServiceServer(s, &collector{}) // a service whose calls are traced
	conn := grpctest.Serve(t, s)
	ctx := context.Background()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := collectortracepb.NewTraceServiceClient(conn).Export(ctx, &collectortracepb.ExportTraceServiceRequest{}); err != nil {
		t.Fatal(err)
	}
	// A server span ends after the client has its answer: wait for the
	// calls to end, as paymentsd's Close does, before the last flush.
	s.GracefulStop()
	e.Shutdown(logger)

	col.mu.Lock()
	defer col.mu.Unlock()
	want := "opentelemetry.proto.collector.trace.v1.TraceService/Export paymentsd"
	if len(col.names) != 1 || col.names[0] != want {
		t.Errorf("spans %q, want [%s]; log:\n%s", col.names, want, log.String())
	}
}
