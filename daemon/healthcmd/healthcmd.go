// Package healthcmd is paymentsd health: it asks a running server its
// health over grpc.health.v1. Container health checks and exec probes run
// it, as a load balancer would ask.
package healthcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/internal/safefile"
)

// about is what paymentsd health -h says above its flags.
const about = `Asks a running paymentsd its health over grpc.health.v1, as a load
balancer does, for container health checks and exec probes: exit 0 when it
answers SERVING, 1 for anything else (NOT_SERVING, a service it does not
know, no answer within --timeout, a refused connection or handshake),
which it prints; 2 for a bad command line. The server reports NOT_SERVING
while its store does not serve (a full disk, the database down) and once
it shuts down.

Plaintext unless --tls-ca or --tls-cert is given: TLS then, trusting the
CAs of --tls-ca (without it, the system's), presenting the client
certificate --tls-cert with --tls-key when the server asks for one (mutual
TLS). It reads no PAYMENTSD_ variable: the server's PAYMENTSD_TLS_CERT is
its own certificate, not a client's.`

// Run is paymentsd health.
func Run(ctx context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, name, "[--addr A] [--tls-ca F] [--tls-cert F --tls-key F] [--service NAME] [--timeout D]", about)
	var p probe
	fs.StringVar(&p.addr, "addr", config.Default().Listen, "the server's gRPC address, host:port")
	fs.StringVar(&p.ca, "tls-ca", "", "PEM CAs to trust: speak TLS and verify the server's certificate with them")
	fs.StringVar(&p.cert, "tls-cert", "", "PEM client certificate chain, for a server that requires one (--tls-client-ca); speaks TLS")
	fs.StringVar(&p.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&p.service, "service", "", `the service to ask about ("payments.v1.PaymentIntentService"); empty, the default, asks about the server`)
	fs.DurationVar(&p.timeout, "timeout", 5*time.Second, "how long to wait for the answer, connecting included")
	operands, code, err := cli.ParseArgs(fs, args, nil)
	switch {
	case err != nil:
		return code
	case len(operands) > 0:
		return cli.UsageError(fs, "unexpected arguments %q", operands)
	case p.addr == "":
		return cli.UsageError(fs, "--addr must name an address (host:port)")
	case (p.cert == "") != (p.key == ""):
		return cli.UsageError(fs, "--tls-cert and --tls-key go together: give both or neither")
	case p.timeout <= 0:
		return cli.UsageError(fs, "--timeout must be positive, got %v", p.timeout)
	}
	return p.ask(ctx, sio, fs)
}

// name is how the command names itself in its messages.
const name = "paymentsd health"

// probe is what paymentsd health was asked: whom, about what, how long.
type probe struct {
	addr, ca, cert, key, service string
	timeout                      time.Duration
}

// ask asks p.addr about p.service and prints the answer. It exits 0 for
// SERVING and 1 for anything else. An address grpc-go refuses is a usage
// error of fs.
func (p *probe) ask(ctx context.Context, sio *cli.Stdio, fs *flag.FlagSet) int {
	creds := insecure.NewCredentials()
	var cfg *tls.Config // nil for plaintext
	if p.ca != "" || p.cert != "" {
		var err error
		if cfg, err = clientTLS(p.ca, p.cert, p.key); err != nil {
			fmt.Fprintf(sio.Err, "%s: %v\n", name, err)
			return cli.ExitNo
		}
		creds = credentials.NewTLS(cfg.Clone())
	}
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return cli.UsageError(fs, "--addr %q: %v", p.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
	if err != nil {
		s := status.Convert(err)
		if s.Code() == codes.Unavailable {
			if why := p.diagnose(ctx, cfg); why != "" {
				fmt.Fprintf(sio.Err, "%s: %s: %s (%s: %s)\n", name, p.addr, why, s.Code(), s.Message())
				return cli.ExitNo
			}
		}
		fmt.Fprintf(sio.Err, "%s: %s: %s: %s\n", name, p.addr, s.Code(), s.Message())
		return cli.ExitNo
	}
	fmt.Fprintln(sio.Out, resp.Status)
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return cli.ExitNo
	}
	return cli.ExitOK
}

// diagnose says what is wrong, and the fix, when a call failed for want
// of TLS or of a client certificate. It handshakes again to find out.
// cfg is the client's TLS, nil for plaintext. It returns "" when unsure.
func (p *probe) diagnose(ctx context.Context, cfg *tls.Config) string {
	if cfg != nil && p.speaksPlaintext(ctx) {
		return "the server speaks plaintext, not TLS: leave out --tls-ca, --tls-cert and --tls-key"
	}
	if cfg != nil && p.cert != "" {
		return "" // a certificate was sent: the handshake's error says why
	}
	host, _, err := net.SplitHostPort(p.addr)
	if err != nil {
		return "" // a target grpc-go resolves, such as dns:///host:port
	}
	if cfg == nil {
		// Whom a TLS server is does not matter to know that it speaks TLS.
		cfg = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	}
	cfg = cfg.Clone()
	cfg.ServerName, cfg.NextProtos = host, []string{"h2"}
	asked := false
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked = true
		return &tls.Certificate{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if verr := (*tls.CertificateVerificationError)(nil); errors.As(err, &verr) {
		return "" // the server's certificate is the trouble, said as is
	}
	speaksTLS, required := err == nil || asked, asked && err != nil
	if err == nil {
		// Under TLS 1.3 a server refuses a missing certificate after the
		// client's side of the handshake: it closes where gRPC would write.
		deadline, _ := ctx.Deadline()
		conn.SetReadDeadline(deadline)
		_, rerr := conn.Read(make([]byte, 1))
		var nerr net.Error
		required = asked && rerr != nil && !(errors.As(rerr, &nerr) && nerr.Timeout())
		conn.Close()
	}
	switch {
	case p.ca == "" && p.cert == "" && speaksTLS && required:
		return "the server speaks TLS and requires a client certificate: pass --tls-ca FILE, the CA of its certificate, with --tls-cert and --tls-key"
	case p.ca == "" && p.cert == "" && speaksTLS:
		return "the server speaks TLS: pass --tls-ca FILE, the CA of its certificate"
	case required:
		return "the server requires a client certificate: pass --tls-cert and --tls-key"
	}
	return ""
}

// speaksPlaintext reports whether the server answered a TLS hello with
// something that is not TLS, as a plaintext gRPC server does.
func (p *probe) speaksPlaintext(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err == nil {
		conn.Close()
	}
	var notTLS tls.RecordHeaderError
	return errors.As(err, &notTLS)
}

// clientTLS is the TLS of a client that trusts the CAs in the file ca, or
// the system's when ca is "". With cert and key given, it presents the
// certificate in cert with the key in key.
func clientTLS(ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := safefile.Read(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", ca)
		}
	}
	if cert != "" {
		certPEM, err := safefile.Read(cert)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert: %w", err)
		}
		keyPEM, err := safefile.ReadPrivate(key)
		if err != nil {
			return nil, fmt.Errorf("--tls-key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
