package main

import (
	"context"
	"fmt"
	"os"

	"github.com/paymentsd/paymentsd/auth"
)

const hashTokenAbout = `Reads a bearer token from standard input (its first line) and prints the
line of the --api-keys file that accepts it for PRINCIPAL:

    PRINCIPAL sha256:<hex of the token's SHA-256>

The file holds no token, so leaking it gives no access. The token never
appears on the command line, where ps and shell history would show it.`

// runHashToken is paymentsd hash-token PRINCIPAL.
func runHashToken(_ context.Context, sio *stdio, args []string) int {
	fs := newFlagSet(sio, "hash-token", "PRINCIPAL < token", hashTokenAbout)
	flagPrincipal := fs.String("principal", "", "the principal, if not given as PRINCIPAL")
	operands, code, err := parseArgs(fs, args)
	if err != nil {
		return code
	}
	principal := *flagPrincipal
	switch {
	case len(operands) == 1 && principal == "":
		principal = operands[0]
	case len(operands) > 1 || (len(operands) == 1 && principal != ""):
		return usageError(fs, "give one PRINCIPAL")
	case principal == "":
		return usageError(fs, "give the PRINCIPAL the token belongs to")
	}
	if !auth.ValidPrincipal(principal) {
		return usageError(fs, "principal %q: use 1 to 64 of A-Z a-z 0-9 . _ -", principal)
	}
	if f, ok := sio.in.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(sio.err, "Paste the token and press Enter (it is shown as you type; pipe it in to avoid that):")
		}
	}
	token, err := readToken(sio.in)
	if err != nil {
		return fail(sio, "hash-token", err)
	}
	fmt.Fprintln(sio.out, auth.KeyLine(principal, token))
	return exitOK
}
