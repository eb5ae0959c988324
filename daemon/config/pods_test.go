package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/config"
)

func TestParsePods(t *testing.T) {
	pods, err := config.ParsePods([]byte("# two pods\n\na postgres://u:secret@h1/db\n  pod-2   POSTGRESQL://h2/db?sslmode=disable  \n"))
	want := []config.Pod{{Name: "a", URL: "postgres://u:secret@h1/db"}, {Name: "pod-2", URL: "postgresql://h2/db?sslmode=disable"}}
	if err != nil || !reflect.DeepEqual(pods, want) {
		t.Fatalf("ParsePods = %+v, %v; want %+v", pods, err, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "no pods"},
		{"# only\n", "no pods"},
		{"a\n", "line 1: want \"<name> <postgres:// URL>\", got 1 fields"},
		{"a postgres://h/db extra\n", "line 1: want \"<name> <postgres:// URL>\", got 3 fields"},
		{"A postgres://h/db\n", "line 1: a pod's name must be 1 to 32 of a-z, 0-9 and -"},
		{"postgres://u:secret@h/db a\n", "line 1: a pod's name must be"},
		{strings.Repeat("a", 33) + " postgres://h/db\n", "must be 1 to 32"},
		{"a data/paymentsd.db\n", "line 1: pod a: want a postgres:// or postgresql:// URL"},
		{"a host=h password=secret\n", "line 1: want"},
		{"a mysql://u:secret@h/db\n", "line 1: pod a: want a postgres:// or postgresql:// URL"},
		{"a postgres://h/one\n\na postgres://h/two\n", "line 3: pod a named twice"},
		{"a postgres://u:secret@h/db\nb postgres://u:secret@h/db\n", "line 2: pod b has the URL of a pod before it"},
	} {
		_, err := config.ParsePods([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("ParsePods(%q) = %v, want %q and no password", tc.in, err, tc.want)
		}
	}
}

func TestReadPods_AFileOthersMayWriteIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods")
	if err := os.WriteFile(path, []byte("a postgres://h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pods, err := config.ReadPods(path); err != nil || len(pods) != 1 {
		t.Fatalf("ReadPods of a private file = %+v, %v", pods, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := config.ReadPods(path); err == nil || !strings.HasPrefix(err.Error(), "--pods: ") {
		t.Errorf("ReadPods of a file anyone may write = %v, want a refusal naming --pods", err)
	}
}
