package devcerts

import (
	"strings"
	"testing"
)

func TestShellQuote(t *testing.T) {
	for s, want := range map[string]string{
		"certs/dev":     "certs/dev",
		"/a-b_c.d:e@f%": "/a-b_c.d:e@f%",
		"with space":    "'with space'",
		"it's":          `'it'\''s'`,
		"":              "''",
		"$HOME":         "'$HOME'",
	} {
		if got := shellQuote(s); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestInstructions_PathsQuoted(t *testing.T) {
	got := Instructions("my certs")
	for _, want := range []string{
		"paymentsd --tls-cert 'my certs/server.pem' --tls-key 'my certs/server-key.pem' --tls-client-ca 'my certs/ca.pem'",
		"curl --cacert 'my certs/ca.pem' --cert 'my certs/client-a.pem' --key 'my certs/client-a-key.pem'",
		"development only",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Instructions lack %q:\n%s", want, got)
		}
	}
}
