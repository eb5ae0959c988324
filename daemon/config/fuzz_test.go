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
