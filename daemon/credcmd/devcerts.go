package credcmd

import (
	"context"
	"fmt"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
)

const devCertsAbout = `Writes a new development CA and certificates signed by it into DIR (made
0700 if missing), to try TLS and mutual TLS in one command:

    ca.pem                             the CA (its key is not kept)
    server.pem, server-key.pem         localhost, 127.0.0.1, ::1
    client-a.pem, client-a-key.pem     spiffe://paymentsd.dev/client-a
    client-b.pem, client-b-key.pem     spiffe://paymentsd.dev/client-b

Keys are unencrypted, mode 0600. For development only: never for production.
Existing files are never overwritten; the command fails and writes nothing.`

// DevCerts is paymentsd dev-certs DIR.
func DevCerts(_ context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd dev-certs", "DIR", devCertsAbout)
	operands, code, err := cli.ParseArgs(fs, args, config.SharedDefaults)
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
	fmt.Fprint(sio.Out, devcerts.Instructions(dir))
	return cli.ExitOK
}
