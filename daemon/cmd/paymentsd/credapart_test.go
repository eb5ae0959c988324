package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// customerToken is the token of the API key file the tests below share.
const customerToken = "customer-token-apart"

// apartFiles writes an --api-keys file naming alice, and returns it with
// ways of making from it an --admin-keys file that is, or holds, a
// customer's key.
func apartFiles(t *testing.T) (apiKeys string, bad map[string]func(path string)) {
	t.Helper()
	dir := t.TempDir()
	apiKeys = filepath.Join(dir, "api-keys")
	customers := auth.KeyLine("alice", customerToken) + "\n" + auth.KeyLine("bob", "customer-token-bob") + "\n"
	if err := os.WriteFile(apiKeys, []byte(customers), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(path, data string) {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return apiKeys, map[string]func(string){
		"symlink":   func(path string) { must(t, os.Symlink(apiKeys, path)) },
		"hard link": func(path string) { must(t, os.Link(apiKeys, path)) },
		"copy":      func(path string) { write(path, customers) },
		"one shared hash": func(path string) {
			write(path, auth.KeyLine(consoleOperator, consoleToken)+"\n"+"ops-2 "+strings.Fields(auth.KeyLine("x", customerToken))[1]+"\n")
		},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsApart_CustomerKeysAsOperatorKeys_RefusedAtStart(t *testing.T) {
	apiKeys, bad := apartFiles(t)
	for name, make := range bad {
		t.Run(name, func(t *testing.T) {
			admin := filepath.Join(t.TempDir(), "admin-keys")
			make(admin)
			code, stderr, dataDir := runToExit(t, "--api-keys", apiKeys, "--admin-keys", admin, "--admin-listen", "127.0.0.1:0")
			if code != 2 || !strings.Contains(stderr, "a customer's token must not be an operator's") {
				t.Fatalf("exit %d, want 2 refusing the operator file:\n%s", code, stderr)
			}
			if strings.Contains(stderr, customerToken) {
				t.Error("the refusal holds the token")
			}
			noDataDir(t, dataDir)
		})
	}
}

// The same files swapped in while paymentsd runs, by a rename or before a
// SIGHUP, are refused: the operators in use stay, and the refusal is
// logged and counted.
func TestCredentialsApart_CustomerKeysSwappedIn_RefusedOperatorsKept(t *testing.T) {
	apiKeys, bad := apartFiles(t)
	admin := adminKeysFile(t)
	d, base := startConsole(t, admin, spec{metrics: true, args: []string{"--api-keys", apiKeys}})
	target := consoleRecordURL(base, "alice", "never-used")
	refusals := 0
	for name, make := range bad {
		for _, hup := range []bool{false, true} {
			tmp := filepath.Join(filepath.Dir(admin), "swap")
			make(tmp)
			must(t, os.Rename(tmp, admin))
			if hup {
				d.hup(t)
			}
			refusals++
			waitFor(t, 10*time.Second, name+": the refusal counted", func() bool {
				return d.scrape(t)[`paymentsd_credential_reloads_total{file="admin_keys",result="error"}`] >= float64(refusals)
			})
			if a := httpCall(t, "GET", target, "", bearerHeader(consoleToken)...); a.status != 404 {
				t.Errorf("%s (SIGHUP %v): the operator in use: %d %s", name, hup, a.status, a.body)
			}
			if a := httpCall(t, "GET", target, "", bearerHeader(customerToken)...); a.status != 401 {
				t.Errorf("%s (SIGHUP %v): a customer's token at the console: %d %s", name, hup, a.status, a.body)
			}
			// The next swap starts from the operators' own file.
			must(t, os.Remove(admin))
			must(t, os.WriteFile(admin, []byte(auth.KeyLine(consoleOperator, consoleToken)+"\n"), 0o600))
			waitFor(t, 10*time.Second, "the operators' file back", func() bool {
				return strings.Count(d.stderr(), `"msg":"operator keys reloaded"`) >= refusals
			})
		}
	}
	if !strings.Contains(d.stderr(), "operator keys not reloaded: the previous keys stay in use") {
		t.Errorf("no refused reload logged:\n%s", d.stderr())
	}
	if strings.Contains(d.stderr(), customerToken) {
		t.Error("a token reached the log")
	}
}

// Customers' keys that come to hold an operator's token are refused too.
func TestCredentialsApart_OperatorTokenAddedToAPIKeys_Refused(t *testing.T) {
	apiKeys, _ := apartFiles(t)
	d, _ := startConsole(t, "", spec{metrics: true, args: []string{"--api-keys", apiKeys}})
	tmp := apiKeys + ".new"
	must(t, os.WriteFile(tmp, []byte(auth.KeyLine("mallory", consoleToken)+"\n"), 0o600))
	must(t, os.Rename(tmp, apiKeys))
	d.waitLine(t, keysRefused, map[string]any{"err": contains("list one token")}, logWait)
	if got := d.scrape(t)[`paymentsd_credential_reloads_total{file="api_keys",result="error"}`]; got != 1 {
		t.Errorf("api_keys refusals counted: %v, want 1", got)
	}
}

// An emptied operator file's refusal names the operator file.
func TestCredentialsApart_EmptiedOperatorFile_NamedAsSuch(t *testing.T) {
	admin := adminKeysFile(t)
	d, _ := startConsole(t, admin, spec{})
	must(t, os.WriteFile(admin, nil, 0o600))
	d.waitLine(t, "operator keys not reloaded: the previous keys stay in use", map[string]any{"err": contains("operator keys: " + admin + " lists no keys")}, logWait)
}
