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

// defaultsFromEnv sets each flag of fs whose environment variable is set
// to its value, before the command line is parsed, so that the command
// line wins and fs.Visit still tells what the command line gave; only,
// when not nil, names the flags to look up. A value is never repeated in
// an error: it may be a secret (a database URL with its password).
func defaultsFromEnv(fs *flag.FlagSet, only map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || (only != nil && !only[f.Name]) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("%s: not a valid value for --%s", envName(f.Name), f.Name)
		}
	})
	return err
}

// given reports whether the command line gave flag name.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
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
