// Package envflags sets flags from environment variables, refusing the
// variables that look like mistakes: a misspelled name, an empty value.
package envflags

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Env names the variables of a program's flags.
type Env struct {
	// Prefix starts every variable's name, as "PAYMENTSD_".
	Prefix string
	// EmptyMeansNone are the flags whose empty value turns something off
	// (empty serves none). For any other flag, an empty variable is
	// refused.
	EmptyMeansNone map[string]bool
}

// Name is the environment variable of flag name. It is Prefix, then the
// name in upper case with dashes as underscores.
func (e Env) Name(name string) string {
	return e.Prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Defaults sets each flag of fs whose environment variable is set to its
// value. It runs before the command line is parsed, so the command line
// wins. And fs.Visit (Given) still tells what the command line gave. The
// argument only, when not nil, names the flags to look up. A value is never
// repeated in an error, since it may be a secret, such as a database URL
// with its password.
//
// A variable that nearly names a flag, or is set but empty, is refused.
// Ignoring it, or taking it as an empty value, could quietly leave a
// setting such as an API key file unset. A server would then run in its
// dev mode.
func (e Env) Defaults(fs *flag.FlagSet, only map[string]bool) error {
	names := slices.Collect(maps.Keys(only))
	own := map[string]bool{} // fs's own flags' variables, read or not, are no misspelling
	fs.VisitAll(func(f *flag.Flag) {
		own[e.Name(f.Name)] = true
		if only == nil {
			names = append(names, f.Name)
		}
	})
	if err := e.misspelled(names, own); err != nil {
		return err
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || (only != nil && !only[f.Name]) {
			return
		}
		v, ok := os.LookupEnv(e.Name(f.Name))
		switch {
		case !ok:
		case v == "" && !e.EmptyMeansNone[f.Name]:
			err = fmt.Errorf("%s is set but empty: unset it for the default of --%s", e.Name(f.Name), f.Name)
		case f.Value.Set(v) != nil:
			err = fmt.Errorf("%s: not a valid value for --%s", e.Name(f.Name), f.Name)
		}
	})
	return err
}

// misspelled returns an error for the first variable with Prefix that is
// no flag's of names, nor in own, but is within two edits of one's. Case
// is ignored. Variables further from every flag are left alone. Tests and
// scripts have their own, such as PAYMENTSD_CRASH_ROUNDS.
func (e Env) misspelled(names []string, own map[string]bool) error {
	slices.Sort(names)
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(key)
		if !strings.HasPrefix(upper, e.Prefix) || own[key] {
			continue
		}
		near, dist := "", 3
		for _, name := range names {
			if key == e.Name(name) {
				near = ""
				break
			}
			if d := editDistance(upper[len(e.Prefix):], e.Name(name)[len(e.Prefix):]); d < dist {
				near, dist = e.Name(name), d
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

// Given reports whether the command line gave flag name (and not only its
// environment variable).
func Given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
