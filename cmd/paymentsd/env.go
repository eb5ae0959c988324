package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envHelp is what help says of the environment.
const envHelp = `Every flag of the server can also be set in the environment as
PAYMENTSD_<FLAG>, upper case with dashes as underscores (--api-keys is
PAYMENTSD_API_KEYS, --tls-client-ca PAYMENTSD_TLS_CLIENT_CA); a flag given
on the command line wins. The operator subcommands read the variables of
the flags they share with the server (PAYMENTSD_DB, PAYMENTSD_API_KEYS).`

// envName is the environment variable of flag name.
func envName(name string) string {
	return "PAYMENTSD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// setFromEnv sets each flag of fs not given on the command line from its
// environment variable, if set; only, when only is not nil, the flags it
// names. A value is never repeated in an error: it may be a secret (a
// database URL with its password).
func setFromEnv(fs *flag.FlagSet, only map[string]bool) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || (only != nil && !only[f.Name]) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s: not a valid value for --%s", envName(f.Name), f.Name)
		}
	})
	return err
}

// serverFlags are the names of the server's flags, which subcommands take
// from the environment too.
func serverFlags() map[string]bool {
	names := map[string]bool{}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	NewMain(io.Discard).defineFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}
