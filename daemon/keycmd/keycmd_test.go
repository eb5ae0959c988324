package keycmd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/keycmd"
)

func TestRecordAndRelease_BadCommandLine_Exits2(t *testing.T) {
	cmds := map[string]func(context.Context, *cli.Stdio, []string) int{"record": keycmd.Record, "release": keycmd.Release}
	for name, cmd := range cmds {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--principal", "p"}, "--key is required"},
			{[]string{"--key", "k"}, "give one of --principal and --token-stdin"},
			{[]string{"--principal", "p", "--token-stdin", "--key", "k"}, "give one of --principal and --token-stdin"},
			{[]string{"--principal", "p", "--api-keys", "keys", "--key", "k"}, "--api-keys goes with --token-stdin"},
			{[]string{"--principal", "p", "--key", "k", "extra"}, "unexpected arguments"},
			{[]string{"--principal", "p", "--key", "k", "--db", "host=db password=x"}, "--db must be"},
		} {
			var out, errOut bytes.Buffer
			code := cmd(context.Background(), &cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errOut}, c.args)
			if code != cli.ExitUsage || !strings.Contains(errOut.String(), c.want) {
				t.Errorf("%s %q: exit %d, %q; want 2 and %q", name, c.args, code, errOut.String(), c.want)
			}
		}
	}
}

// A key with no record is answered with a hint on how else its principal
// may be named. The command does not know how the server authenticates,
// so the hint follows from how it was given the principal: it never
// assumes dev mode of a principal named outright, and never points at dev
// mode when an --api-keys file named the principal.
func TestRecord_NoRecord_HintFitsHowThePrincipalWasGiven(t *testing.T) {
	t.Setenv("PAYMENTSD_API_KEYS", "")
	os.Unsetenv("PAYMENTSD_API_KEYS") // restored when the test ends
	dir := t.TempDir()
	db := filepath.Join(dir, "paymentsd.db")
	b, err := boltstore.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alice-secret"))
	keys := filepath.Join(dir, "api-keys")
	if err := os.WriteFile(keys, []byte("alice sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	devPrincipal := func(token string) string {
		sum := sha256.Sum256([]byte(token))
		return "dev:" + hex.EncodeToString(sum[:])
	}
	everyForm := []string{"--api-keys", `"dev:" and its token's SHA-256 in dev mode`, "spiffe://", `"dns:"`, "--token-stdin"}
	for _, c := range []struct {
		name, stdin string
		args        []string
		want, not   []string
	}{
		{name: "a name, as --api-keys lists", args: []string{"--principal", "acme-shop"}, want: everyForm},
		{name: "a dev principal", args: []string{"--principal", devPrincipal("tok")}, want: everyForm},
		{name: "a certificate's principal", args: []string{"--principal", "spiffe://example.org/shop"}, want: everyForm},
		{
			name: "a token, taken as dev mode's", stdin: "tok\n", args: []string{"--token-stdin"},
			want: []string{devPrincipal("tok"), "with no --api-keys", "dev mode", "if the server runs with --api-keys, give that file too"},
		},
		{
			name: "a token, its principal from --api-keys", stdin: "alice-secret\n", args: []string{"--token-stdin", "--api-keys", keys},
			want: []string{`for principal "alice"`}, not: []string{"dev", "spiffe"},
		},
	} {
		for _, asJSON := range []bool{false, true} {
			args := append([]string{"--db", db, "--key", "order-9999"}, c.args...)
			if asJSON {
				args = append(args, "--json")
			}
			var out, errOut bytes.Buffer
			code := keycmd.Record(context.Background(), &cli.Stdio{In: strings.NewReader(c.stdin), Out: &out, Err: &errOut}, args)
			msg := errOut.String()
			if asJSON {
				var none struct{ Message string }
				if err := json.Unmarshal(out.Bytes(), &none); err != nil {
					t.Fatalf("%s, --json: %v\n%s", c.name, err, out.String())
				}
				msg = none.Message
			}
			if code != cli.ExitNo || !strings.Contains(msg, `no record of key "order-9999"`) {
				t.Errorf("%s (--json %t): exit %d, %q; want 1 and no record", c.name, asJSON, code, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s (--json %t): %q does not say %q", c.name, asJSON, msg, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(msg, n) {
					t.Errorf("%s (--json %t): %q says %q", c.name, asJSON, msg, n)
				}
			}
		}
	}
}
