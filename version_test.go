package paymentsd_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd"
)

// semver is a semantic version with a v: three numbers, then maybe a
// pre-release such as -dev. Build metadata (+...) is not used.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// releaseHeading is a release's section in CHANGELOG.md.
var releaseHeading = regexp.MustCompile(`(?m)^## \[(v[^\]]+)\] - \d{4}-\d{2}-\d{2}$`)

// TestVERSION_IsTheNewestReleaseOrAPreReleaseOfALaterOne: VERSION is one
// semantic version. It is the newest release of CHANGELOG.md, which thus
// says what changed, or a pre-release of a later version, between releases.
func TestVERSION_IsTheNewestReleaseOrAPreReleaseOfALaterOne(t *testing.T) {
	v := strings.TrimSuffix(paymentsd.VersionFile, "\n")
	if !semver.MatchString(v) {
		t.Fatalf("VERSION holds %q, want one line such as v1.2.3 or v1.3.0-dev", paymentsd.VersionFile)
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := releaseHeading.FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release section such as ## [v1.2.3] - 2006-01-02")
	}
	if err := checkVersion(v, string(m[1])); err != "" {
		t.Error(err)
	}
}

// checkVersion says what is wrong with VERSION v when the newest release
// is newest, or returns "".
func checkVersion(v, newest string) string {
	if !semver.MatchString(newest) || strings.Contains(newest, "-") {
		return "CHANGELOG.md's newest release " + newest + " is no release such as v1.2.3"
	}
	core, pre, isPre := strings.Cut(v, "-")
	switch {
	case !isPre && v != newest:
		return "VERSION " + v + " is a release, but CHANGELOG.md's newest is " + newest + ": give it a section, or make VERSION a pre-release such as " + v + "-dev"
	case isPre && pre == "":
		return "VERSION " + v + " has an empty pre-release"
	case isPre && !newer(core, newest):
		return "VERSION " + v + " is a pre-release of no version after " + newest + ", CHANGELOG.md's newest release"
	}
	return ""
}

// newer reports whether release a, such as v1.2.3, comes after release b.
func newer(a, b string) bool {
	na, nb := numbers(a), numbers(b)
	for i := range na {
		if na[i] != nb[i] {
			return na[i] > nb[i]
		}
	}
	return false
}

// numbers are the three numbers of release v, such as v1.2.3.
func numbers(v string) [3]uint64 {
	var n [3]uint64
	for i, s := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
		n[i], _ = strconv.ParseUint(s, 10, 64)
	}
	return n
}

func TestCheckVersion(t *testing.T) {
	for _, c := range []struct {
		v, newest string
		ok        bool
	}{
		{"v0.4.0", "v0.4.0", true},
		{"v0.5.0-dev", "v0.4.0", true},
		{"v0.4.1-dev", "v0.4.0", true},
		{"v1.0.0-rc.1", "v0.4.0", true},
		{"v0.10.0-dev", "v0.9.0", true},
		{"v0.5.0", "v0.4.0", false},        // a release without its section
		{"v0.3.0", "v0.4.0", false},        // an older release
		{"v0.4.0-dev", "v0.4.0", false},    // before the release it follows
		{"v0.3.9-dev", "v0.4.0", false},    // older still
		{"v0.5.0-dev", "v0.5.0-rc", false}, // the changelog names no release
	} {
		if err := checkVersion(c.v, c.newest); (err == "") != c.ok {
			t.Errorf("VERSION %s, newest release %s: %q, want ok %t", c.v, c.newest, err, c.ok)
		}
	}
}
