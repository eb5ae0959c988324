package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/paymentsd/paymentsd/internal/safefile"
)

// Pod is one PostgreSQL database of several, by name: a pod holds every
// record and intent of the principals placed on it.
type Pod struct {
	Name string // [a-z0-9-], 1 to 32 characters: a metric label and a health service's name
	URL  string // postgres:// or postgresql://, as --db takes it
}

// maxPods bounds a pods file: each pod is a connection pool and a
// sweeper.
const maxPods = 64

// ReadPods reads the pods file that --pods names. It is a regular file
// that group and others may not write, since its URLs may hold passwords.
func ReadPods(path string) ([]Pod, error) {
	data, err := safefile.ReadPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("--pods: %w", err)
	}
	pods, err := ParsePods(data)
	if err != nil {
		return nil, fmt.Errorf("--pods %s: %w", path, err)
	}
	return pods, nil
}

// ParsePods reads a pods file: one pod a line, its name and its URL
// apart by spaces; blank lines and lines starting with # are skipped.
// Names and URLs are each given once, and at least one pod. An error
// names the line and a valid name, never another field: it may be a URL
// holding a password.
func ParsePods(data []byte) ([]Pod, error) {
	var pods []Pod
	names, urls := map[string]bool{}, map[string]bool{}
	lines := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<name> <postgres:// URL>\", got %d fields", n, len(fields))
		}
		name := fields[0]
		url, err := ParseDB(fields[1])
		switch {
		case !podName(name):
			// Not repeated: the fields may be the wrong way round, the
			// URL first.
			return nil, fmt.Errorf("line %d: a pod's name must be 1 to 32 of a-z, 0-9 and -", n)
		case err != nil || url == "":
			return nil, fmt.Errorf("line %d: pod %s: want a postgres:// or postgresql:// URL", n, name)
		case names[name]:
			return nil, fmt.Errorf("line %d: pod %s named twice", n, name)
		case urls[url]:
			return nil, fmt.Errorf("line %d: pod %s has the URL of a pod before it", n, name)
		case len(pods) == maxPods:
			return nil, fmt.Errorf("line %d: more than %d pods", n, maxPods)
		}
		names[name], urls[url] = true, true
		pods = append(pods, Pod{Name: name, URL: url})
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if len(pods) == 0 {
		return nil, errors.New("no pods: want one line \"<name> <postgres:// URL>\" per pod")
	}
	return pods, nil
}

// podName reports whether s is a pod's name.
func podName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
