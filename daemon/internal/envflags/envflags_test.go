package envflags_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/internal/envflags"
)

var env = envflags.Env{Prefix: "TESTD_", EmptyMeansNone: map[string]bool{"http-listen": true}}

// flags are a program's: an address, a duration, a file.
type flags struct {
	http  string
	lease time.Duration
	keys  string
	fs    *flag.FlagSet
}

func newFlags() *flags {
	f := &flags{fs: flag.NewFlagSet("testd", flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.fs.StringVar(&f.http, "http-listen", "localhost:8080", "")
	f.fs.DurationVar(&f.lease, "lease", time.Second, "")
	f.fs.StringVar(&f.keys, "api-keys", "", "")
	return f
}

func TestName(t *testing.T) {
	if got := env.Name("tls-client-ca"); got != "TESTD_TLS_CLIENT_CA" {
		t.Errorf("got %s", got)
	}
}

func TestDefaults_TheCommandLineWins(t *testing.T) {
	t.Setenv("TESTD_LEASE", "5s")
	t.Setenv("TESTD_API_KEYS", "/etc/keys")
	f := newFlags()
	if err := env.Defaults(f.fs, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.fs.Parse([]string{"--lease", "7s"}); err != nil {
		t.Fatal(err)
	}
	if f.lease != 7*time.Second || f.keys != "/etc/keys" || f.http != "localhost:8080" {
		t.Errorf("got lease %v, keys %q, http %q; want 7s, /etc/keys and the default", f.lease, f.keys, f.http)
	}
	if !envflags.Given(f.fs, "lease") || envflags.Given(f.fs, "api-keys") {
		t.Errorf("Given: lease %v, api-keys %v; want only lease, from the command line",
			envflags.Given(f.fs, "lease"), envflags.Given(f.fs, "api-keys"))
	}
}

func TestDefaults_Only(t *testing.T) {
	t.Setenv("TESTD_LEASE", "5s")
	t.Setenv("TESTD_API_KEYS", "/etc/keys")
	f := newFlags()
	if err := env.Defaults(f.fs, map[string]bool{"api-keys": true}); err != nil {
		t.Fatal(err)
	}
	if f.lease != time.Second || f.keys != "/etc/keys" {
		t.Errorf("got lease %v, keys %q; want the default and /etc/keys", f.lease, f.keys)
	}
}

// A variable of the command's own flag, left unread by only, is no
// misspelling of a flag only names, however near.
func TestDefaults_Only_OwnFlagNotMisspelled(t *testing.T) {
	t.Setenv("TESTD_LEASE", "5s") // within two edits of TESTD_LEAST
	f := newFlags()
	var least string
	f.fs.StringVar(&least, "least", "", "")
	if err := env.Defaults(f.fs, map[string]bool{"least": true}); err != nil {
		t.Fatalf("own flag's variable refused: %v", err)
	}
	if f.lease != time.Second {
		t.Errorf("lease %v, want the default: only leaves it unread", f.lease)
	}
}

func TestDefaults_Refused(t *testing.T) {
	cases := []struct {
		name, key, value, want string
	}{
		{"empty", "TESTD_API_KEYS", "", "TESTD_API_KEYS is set but empty: unset it for the default of --api-keys"},
		{"misspelled", "TESTD_API_KEY", "/etc/keys", "TESTD_API_KEY is not a setting; did you mean TESTD_API_KEYS?"},
		{"in another case", "testd_api_keys", "/etc/keys", "testd_api_keys is not a setting; did you mean TESTD_API_KEYS?"},
		{"invalid, never repeated", "TESTD_LEASE", "s3cret", "TESTD_LEASE: not a valid value for --lease"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.key, c.value)
			err := env.Defaults(newFlags().fs, nil)
			if err == nil || err.Error() != c.want {
				t.Fatalf("got %v, want %s", err, c.want)
			}
			if c.value != "" && strings.Contains(err.Error(), c.value) {
				t.Errorf("the error repeats the value %q", c.value)
			}
		})
	}
}

func TestDefaults_Allowed(t *testing.T) {
	t.Setenv("TESTD_HTTP_LISTEN", "")           // empty serves none
	t.Setenv("TESTD_CRASH_ROUNDS", "3")         // far from every flag: a test's own
	t.Setenv("OTHER_API_KEY", "not our prefix") // another program's
	f := newFlags()
	if err := env.Defaults(f.fs, nil); err != nil {
		t.Fatal(err)
	}
	if f.http != "" {
		t.Errorf("http-listen %q, want empty", f.http)
	}
}
