package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/paymentsd/paymentsd/internal/cli"
	"github.com/paymentsd/paymentsd/internal/devcerts"
)

const devCertsAbout = `Writes a new development CA and certificates signed by it into DIR (made
0700 if missing), to try TLS and mutual TLS in one command:

    ca.pem                             the CA (its key is not kept)
    server.pem, server-key.pem         localhost, 127.0.0.1, ::1
    client-a.pem, client-a-key.pem     spiffe://paymentsd.dev/client-a
    client-b.pem, client-b-key.pem     spiffe://paymentsd.dev/client-b

Keys are unencrypted, mode 0600. For development only: never for production.
Existing files are never overwritten; the command fails and writes nothing.`

// runDevCerts is paymentsd dev-certs DIR.
func runDevCerts(_ context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd dev-certs", "DIR", devCertsAbout)
	operands, code, err := parseArgs(fs, args)
	if err != nil {
		return code
	}
	if len(operands) != 1 || operands[0] == "" {
		return cli.UsageError(fs, "give one DIR")
	}
	dir := operands[0]
	paths, err := devcerts.Dev(dir)
	if err != nil {
		return cli.Fail(sio, "paymentsd dev-certs", err)
	}
	for _, p := range paths {
		fmt.Fprintln(sio.Out, p)
	}
	f := func(name string) string { return shellQuote(filepath.Join(dir, name)) }
	fmt.Fprintf(sio.Out, `
These certificates are for development only: never use them in production.

Serve with TLS, client certificates required:

  paymentsd --tls-cert %s --tls-key %s --tls-client-ca %s

Call it as client-a:

  grpcurl -cacert %[3]s -cert %[4]s -key %[5]s \
    localhost:50051 grpc.health.v1.Health/Check
  grpcurl -cacert %[3]s -cert %[4]s -key %[5]s \
    -H 'authorization: Bearer merchant-demo' -d '{"page_size":10}' \
    localhost:50051 payments.v1.PaymentIntentService/ListPaymentIntents
  curl --cacert %[3]s --cert %[4]s --key %[5]s \
    -H 'Authorization: Bearer merchant-demo' https://localhost:8080/v1/payment_intents
`, f("server.pem"), f("server-key.pem"), f("ca.pem"), f("client-a.pem"), f("client-a-key.pem"))
	return cli.ExitOK
}

// shellQuote quotes s for a POSIX shell if it needs it, so that the printed
// commands paste as they are whatever DIR is.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
