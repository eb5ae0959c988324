// Package credcmd is paymentsd hash-token and dev-certs, the subcommands
// that make credentials: the line of an API key file, and a development
// CA with its certificates.
package credcmd

import (
	"context"
	"fmt"
	"os"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/internal/bearer"
)

const hashTokenAbout = `Reads a bearer token from standard input (its first line) and prints the
line of the --api-keys file that accepts it for PRINCIPAL:

    PRINCIPAL sha256:<hex of the token's SHA-256>

The file holds no token, so leaking it gives no access. The token never
appears on the command line, where ps and shell history would show it.`

// HashToken is paymentsd hash-token PRINCIPAL.
func HashToken(_ context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd hash-token", "PRINCIPAL < token", hashTokenAbout)
	flagPrincipal := fs.String("principal", "", "the principal, if not given as PRINCIPAL")
	operands, code, err := cli.ParseArgs(fs, args, config.SharedDefaults)
	if err != nil {
		return code
	}
	principal := *flagPrincipal
	switch {
	case len(operands) == 1 && principal == "":
		principal = operands[0]
	case len(operands) > 1 || (len(operands) == 1 && principal != ""):
		return cli.UsageError(fs, "give one PRINCIPAL")
	case principal == "":
		return cli.UsageError(fs, "give the PRINCIPAL the token belongs to")
	}
	if !auth.ValidPrincipal(principal) {
		return cli.UsageError(fs, "principal %q: use 1 to 64 of A-Z a-z 0-9 . _ -", principal)
	}
	if f, ok := sio.In.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(sio.Err, "Paste the token and press Enter (it is shown as you type; pipe it in to avoid that):")
		}
	}
	token, err := bearer.ReadToken(sio.In)
	if err != nil {
		return cli.Fail(sio, "paymentsd hash-token", err)
	}
	fmt.Fprintln(sio.Out, auth.KeyLine(principal, token))
	return cli.ExitOK
}
