package keycmd_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/keycmd"
	"github.com/paymentsd/paymentsd/internal/cli"
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
