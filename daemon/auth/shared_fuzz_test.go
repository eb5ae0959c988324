package auth_test

import (
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// lineHashes reads a key file as an oracle would, line by line: each
// listed hash, in lower case, to its principal.
func lineHashes(data []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
			out[strings.ToLower(strings.TrimPrefix(fields[1], "sha256:"))] = fields[0]
		}
	}
	return out
}

// FuzzKeysShared reads two key files, an API's and its operators', and
// wants Shared to find a token in both exactly when a hash is listed in
// both, in any case of its hex, naming principals that do list it.
func FuzzKeysShared(f *testing.F) {
	f.Add([]byte(auth.KeyLine("alice", "a")+"\n"), []byte(auth.KeyLine("ops", "o")+"\n"))
	f.Add([]byte(auth.KeyLine("alice", "a")+"\n"+auth.KeyLine("bob", "b")), []byte("# ops\n"+auth.KeyLine("ops", "b")+"\n"))
	f.Add([]byte(auth.KeyLine("alice", "a")), []byte("ops "+strings.ToUpper(auth.KeyLine("alice", "a")[len("alice "):])))
	f.Add([]byte(auth.KeyLine("alice", "a")), []byte("ops sha256:"+strings.ToUpper(auth.KeyLine("alice", "a")[len("alice sha256:"):])))
	f.Fuzz(func(t *testing.T, api, admin []byte) {
		a, errA := auth.ParseKeys(api, "api-keys")
		o, errO := auth.ParseKeys(admin, "admin-keys")
		if errA != nil || errO != nil {
			return
		}
		apiHashes, adminHashes := lineHashes(api), lineHashes(admin)
		var want bool
		for h := range apiHashes {
			if _, ok := adminHashes[h]; ok {
				want = true
			}
		}
		mine, theirs, got := a.Shared(o)
		if got != want {
			t.Fatalf("Shared = %v, want %v\napi:\n%s\nadmin:\n%s", got, want, api, admin)
		}
		if !got {
			return
		}
		for h, p := range apiHashes {
			if p == mine && adminHashes[h] == theirs {
				if _, _, back := o.Shared(a); !back {
					t.Fatal("Shared is not symmetric")
				}
				return
			}
		}
		t.Fatalf("Shared names %q and %q, who list no hash in common", mine, theirs)
	})
}
