package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

func hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func writeKeys(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadFile_AuthenticatesListedTokensOnly(t *testing.T) {
	keys, err := auth.LoadFile(writeKeys(t, "# team keys\n\nalice "+hash("a-secret")+"\n  bob   "+hash("b-secret")+"  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if keys.IsDev() {
		t.Error("keys from a file are in dev mode")
	}
	for token, want := range map[string]string{"a-secret": "alice", "b-secret": "bob"} {
		if got, ok := keys.Authenticate(token); !ok || got != want {
			t.Errorf("Authenticate(%q) = %q, %t; want %q", token, got, ok, want)
		}
	}
	for _, token := range []string{"", "a-secre", "a-secret ", strings.TrimPrefix(hash("a-secret"), "sha256:")} {
		if got, ok := keys.Authenticate(token); ok {
			t.Errorf("Authenticate(%q) = %q, want refused", token, got)
		}
	}
}

func TestLoadFile_RejectsBadFiles(t *testing.T) {
	for name, content := range map[string]string{
		"raw token":        "alice a-secret\n",
		"short hash":       "alice sha256:abcd\n",
		"bad principal":    "al/ice " + hash("x") + "\n",
		"same line twice":  "alice " + hash("x") + "\nalice " + hash("x") + "\n",
		"empty":            "# nothing\n",
		"three fields":     "alice " + hash("x") + " extra\n",
		"non-hex":          "alice sha256:" + strings.Repeat("z", 64) + "\n",
		"missing hash tag": "alice " + strings.TrimPrefix(hash("x"), "sha256:") + "\n",
	} {
		if _, err := auth.LoadFile(writeKeys(t, content)); err == nil {
			t.Errorf("%s: loaded, want an error", name)
		}
	}
	if _, err := auth.LoadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: loaded, want an error")
	}
}

func TestLoadFile_OneHashUnderTwoPrincipals_RefusedNamingBothLines(t *testing.T) {
	path := writeKeys(t, "alice "+hash("shared")+"\n# rotated\nbob "+hash("shared")+"\n")
	_, err := auth.LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path+":3") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("LoadFile = %v, want an error naming %s:3 and line 1", err, path)
	}
}

func TestLoadFile_SeveralHashesForOnePrincipal_TokenRotation(t *testing.T) {
	keys, err := auth.LoadFile(writeKeys(t, "alice "+hash("old")+"\nalice "+hash("new")+"\nbob "+hash("b")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"old": "alice", "new": "alice", "b": "bob"} {
		if got, ok := keys.Authenticate(token); !ok || got != want {
			t.Errorf("Authenticate(%q) = %q, %t; want %q", token, got, ok, want)
		}
	}
}

func TestDev_EachTokenItsOwnPrincipal(t *testing.T) {
	keys := auth.Dev()
	a, okA := keys.Authenticate("token-a")
	b, okB := keys.Authenticate("token-b")
	if !okA || !okB || a == b || !keys.IsDev() {
		t.Errorf("dev principals %q, %q, want two distinct", a, b)
	}
	if strings.Contains(a, "token-a") {
		t.Errorf("dev principal %q contains the raw token", a)
	}
}

func TestPrincipals_CountsEachPrincipalOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	line := func(principal, token string) string {
		sum := sha256.Sum256([]byte(token))
		return principal + " sha256:" + hex.EncodeToString(sum[:]) + "\n"
	}
	// bob rolls his token: two lines, one principal.
	if err := os.WriteFile(path, []byte(line("alice", "a")+line("bob", "b1")+line("bob", "b2")), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := auth.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Principals(); got != 2 {
		t.Errorf("Principals() = %d, want 2", got)
	}
	if got := auth.Dev().Principals(); got != 0 {
		t.Errorf("Dev().Principals() = %d, want 0", got)
	}
}

func TestPrincipalOfToken_FileOrDevMode(t *testing.T) {
	keys := writeKeys(t, "alice "+hash("a-secret")+"\n")
	if p, err := auth.PrincipalOfToken("a-secret", keys); err != nil || p != "alice" {
		t.Errorf("a listed token: %q, %v; want alice", p, err)
	}
	if _, err := auth.PrincipalOfToken("m-secret", keys); err == nil || err.Error() != "the token is not listed in "+keys {
		t.Errorf("an unlisted token: %v", err)
	}
	dev, _ := auth.Dev().Authenticate("m-secret")
	if p, err := auth.PrincipalOfToken("m-secret", ""); err != nil || p != dev || !auth.ValidDevPrincipal(p) {
		t.Errorf("dev mode: %q, %v; want %q", p, err, dev)
	}
	if _, err := auth.PrincipalOfToken("a-secret", filepath.Join(t.TempDir(), "missing")); err == nil || !strings.HasPrefix(err.Error(), "api keys: ") {
		t.Errorf("a missing file: %v", err)
	}
}
