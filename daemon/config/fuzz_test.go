package config

import (
	"strings"
	"testing"
)

// FuzzParseDB feeds any --db value to ParseDB: it must never panic, never
// repeat a refused value (it may hold a password), give back a PostgreSQL
// URL only for the postgres or postgresql scheme, in any case, with the
// rest of the value untouched, and take as a file path only what no
// reader could mistake for a connection string.
func FuzzParseDB(f *testing.F) {
	for _, seed := range []string{"data/paymentsd.db", "postgres://u:secret@h/db", "POSTGRESQL://h/db?sslmode=disable",
		"postgres:secret@h", "host=h password=secret", "mysql://u:p@h/db", "", "://", "a=b", "Postgres://x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, db string) {
		pgURL, err := ParseDB(db)
		switch {
		case err != nil:
			if pgURL != "" || err.Error() != badDB {
				t.Fatalf("ParseDB(%q) = %q, %v; want only the fixed refusal", db, pgURL, err)
			}
		case pgURL != "":
			scheme, rest, _ := strings.Cut(pgURL, "://")
			if (scheme != "postgres" && scheme != "postgresql") || !strings.EqualFold(db[:len(scheme)], scheme) ||
				db[len(scheme):] != "://"+rest {
				t.Fatalf("ParseDB(%q) = %q: want the value with its scheme lower-cased", db, pgURL)
			}
		default:
			lower := strings.ToLower(db)
			if strings.Contains(db, "://") || strings.Contains(db, "=") ||
				strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") {
				t.Fatalf("ParseDB(%q) took a connection-string-like value as a file path", db)
			}
		}
	})
}

// FuzzParsePods feeds any pods file to ParsePods: it must never panic,
// never repeat a URL in its error (one may hold a password), and give back
// only pods with a valid name, a PostgreSQL URL, each given once.
func FuzzParsePods(f *testing.F) {
	for _, seed := range []string{"a postgres://u:secret@h/db\n", "# c\nb postgresql://h/db\n\nc postgres://h/d", "a b c", "A postgres://h/db",
		"a postgres://h/db\na postgres://h/e", "a host=secret", "a\tpostgres://h/db\r\n", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		pods, err := ParsePods([]byte(data))
		if err != nil {
			// Only a valid pod name may be repeated; fields short enough
			// to be in the fixed words by chance are let be.
			fixed := `want "<name> <postgres:// URL>" a postgres:// or postgresql:// URL`
			for _, field := range strings.Fields(data) {
				if len(field) >= 12 && !podName(field) && !strings.Contains(fixed, field) && strings.Contains(err.Error(), field) {
					t.Fatalf("ParsePods(%q): error %q repeats %q", data, err, field)
				}
			}
			return
		}
		names, urls := map[string]bool{}, map[string]bool{}
		for _, p := range pods {
			if u, err := ParseDB(p.URL); err != nil || u != p.URL || !podName(p.Name) || names[p.Name] || urls[p.URL] {
				t.Fatalf("ParsePods(%q) gave %+v", data, p)
			}
			names[p.Name], urls[p.URL] = true, true
		}
		if len(pods) == 0 {
			t.Fatalf("ParsePods(%q) gave no pods and no error", data)
		}
	})
}
