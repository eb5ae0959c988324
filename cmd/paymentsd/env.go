package main

import (
	"flag"
	"io"

	"github.com/paymentsd/paymentsd/internal/envflags"
)

// envHelp is what help says of the environment.
const envHelp = `Every flag of the server can also be set in the environment as
PAYMENTSD_<FLAG>, upper case with dashes as underscores (--api-keys is
PAYMENTSD_API_KEYS, --tls-client-ca PAYMENTSD_TLS_CLIENT_CA); a flag given
on the command line wins. The operator subcommands read the variables of
the flags they share with the server (PAYMENTSD_DB, PAYMENTSD_API_KEYS).
A variable set but empty is refused (unset it for the default), except
PAYMENTSD_HTTP_LISTEN and PAYMENTSD_METRICS_LISTEN, where empty serves
none; so is a PAYMENTSD_ variable within two edits of a setting's name.`

// env is paymentsd's: an empty listen address serves none.
var env = envflags.Env{Prefix: "PAYMENTSD_", EmptyMeansNone: map[string]bool{"http-listen": true, "metrics-listen": true}}

// defaultsFromEnv sets fs's flags from the environment (all, or only
// those named), before the command line, which wins.
func defaultsFromEnv(fs *flag.FlagSet, only map[string]bool) error { return env.Defaults(fs, only) }

// given reports whether the command line gave flag name.
var given = envflags.Given

// serverFlags are the names of the server's flags, which subcommands take
// from the environment too.
func serverFlags() map[string]bool {
	names := map[string]bool{}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	NewMain(io.Discard).defineFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}
