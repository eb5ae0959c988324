package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
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

// envName is the environment variable of flag name.
func envName(name string) string {
	return "PAYMENTSD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// emptyMeansNone are the flags whose empty value turns something off
// (empty serves none); for any other flag an empty variable is refused.
var emptyMeansNone = map[string]bool{"http-listen": true, "metrics-listen": true}

// defaultsFromEnv sets each flag of fs whose environment variable is set
// to its value, before the command line is parsed, so that the command
// line wins and fs.Visit still tells what the command line gave; only,
// when not nil, names the flags to look up. A value is never repeated in
// an error: it may be a secret (a database URL with its password).
//
// A variable that nearly names a flag, or is set but empty, is refused:
// ignoring it, or taking it as an empty value, would quietly leave
// PAYMENTSD_API_KEYS unset, and the server in dev mode, accepting any
// token.
func defaultsFromEnv(fs *flag.FlagSet, only map[string]bool) error {
	names := slices.Collect(maps.Keys(only))
	if only == nil {
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	}
	if err := misspelledEnv(names); err != nil {
		return err
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || (only != nil && !only[f.Name]) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		switch {
		case !ok:
		case v == "" && !emptyMeansNone[f.Name]:
			err = fmt.Errorf("%s is set but empty: unset it for the default of --%s", envName(f.Name), f.Name)
		case f.Value.Set(v) != nil:
			err = fmt.Errorf("%s: not a valid value for --%s", envName(f.Name), f.Name)
		}
	})
	return err
}

// misspelledEnv returns an error for the first PAYMENTSD_ variable that
// is no flag's of names but is within two edits of one's, in any case.
// Variables further from every flag are left alone: tests and scripts
// have their own (PAYMENTSD_CRASH_ROUNDS).
func misspelledEnv(names []string) error {
	const prefix = "PAYMENTSD_"
	slices.Sort(names)
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(key)
		if !strings.HasPrefix(upper, prefix) {
			continue
		}
		near, dist := "", 3
		for _, name := range names {
			if key == envName(name) {
				near = ""
				break
			}
			if d := editDistance(upper[len(prefix):], envName(name)[len(prefix):]); d < dist {
				near, dist = envName(name), d
			}
		}
		if near != "" {
			return fmt.Errorf("%s is not a setting; did you mean %s?", key, near)
		}
	}
	return nil
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
