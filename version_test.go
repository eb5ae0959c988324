package paymentsd_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd"
)

// TestVERSION_IsARelease_TheChangelogSaysWhatItHolds: VERSION is one
// semantic version, v and three numbers, and CHANGELOG.md has its section,
// so that no release goes out without saying what changed.
func TestVERSION_IsARelease_TheChangelogSaysWhatItHolds(t *testing.T) {
	v := strings.TrimSuffix(paymentsd.VersionFile, "\n")
	if !regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION holds %q, want one line such as v1.2.3", paymentsd.VersionFile)
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(v) + `\] - \d{4}-\d{2}-\d{2}$`)
	if !heading.Match(changelog) {
		t.Errorf("CHANGELOG.md has no section %s", heading)
	}
}
