package main

// Files that are not regular or that others may write, refused at start:
// credential files stop the server at once, and a FIFO named as the data
// file is refused by the server and the operator commands instead of
// hanging.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A credential file that is not a regular file, or that group or others
// can write, stops the server at once with exit 2, naming the file and
// what is wrong, before any data file is made.
func TestUnsafeCredentialFile_Exits2AtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup makes the file in dir and returns the flags naming it and
		// what the message must say of it.
		setup func(t *testing.T, dir string) (args []string, says string)
	}{
		{"api keys a FIFO", func(t *testing.T, dir string) ([]string, string) {
			fifo := filepath.Join(dir, "api-keys")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--api-keys", fifo}, "FIFO"
		}},
		{"api keys a directory", func(t *testing.T, dir string) ([]string, string) {
			keysDir := filepath.Join(dir, "api-keys.d")
			if err := os.Mkdir(keysDir, 0o700); err != nil {
				t.Fatal(err)
			}
			return []string{"--api-keys", keysDir}, "directory"
		}},
		{"api keys 0666", func(t *testing.T, dir string) ([]string, string) {
			keys := filepath.Join(dir, "api-keys")
			writeInPlace(t, keys, 0o666, keyFile("alice", "ww-token"))
			return []string{"--api-keys", keys}, "0666"
		}},
		{"api keys 0620", func(t *testing.T, dir string) ([]string, string) {
			keys := filepath.Join(dir, "api-keys")
			writeInPlace(t, keys, 0o620, keyFile("alice", "ww-token"))
			return []string{"--api-keys", keys}, "0620"
		}},
		{"tls key 0606", func(t *testing.T, dir string) ([]string, string) {
			certs := newCertSet(t, "world-writable test CA")
			if err := os.Chmod(certs.serverKey, 0o606); err != nil {
				t.Fatal(err)
			}
			return certs.serverArgs(), "0606"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args, says := tc.setup(t, dir)
			d := start(t, spec{db: filepath.Join(dir, "data", "paymentsd.db"), args: args, noWait: true})
			if code := d.exitCode(t, exitBound); code != 2 {
				t.Errorf("exit %d, want 2:\n%s", code, d.stderr())
			}
			if file := args[len(args)-1]; !strings.Contains(d.stderr(), says) || !strings.Contains(d.stderr(), file) {
				t.Errorf("stderr does not name %s and say %q:\n%s", file, says, d.stderr())
			}
			noDataDir(t, filepath.Join(dir, "data"))
		})
	}
}

func TestFIFO_DataFile_RefusedNotHanging(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "paymentsd.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "backup.db")
	env := cleanEnv()
	for _, args := range [][]string{
		{"check", "--db", fifo},
		{"record", "--db", fifo, "--principal", "p", "--key", "k"},
		{"backup", out, "--db", fifo},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := runBounded(t, exitBound, "", env, args...)
			if r.code != 2 && r.code != 3 {
				t.Errorf("exit %d, want 2 or 3\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr+r.stdout, "FIFO") {
				t.Errorf("the refusal does not say FIFO:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
		})
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup of a FIFO left %s: %v", out, err)
	}
	t.Run("server", func(t *testing.T) {
		d := start(t, spec{db: fifo, noWait: true})
		if code := d.exitCode(t, exitBound); code == 0 {
			t.Errorf("exit 0, want a failure:\n%s", d.stderr())
		}
		if !strings.Contains(d.stderr(), "FIFO") || !strings.Contains(d.stderr(), fifo) {
			t.Errorf("stderr does not name %s as a FIFO:\n%s", fifo, d.stderr())
		}
	})
	if info, err := os.Lstat(fifo); err != nil || info.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v, %v", info, err)
	}
}
