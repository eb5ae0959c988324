package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestRevision(t *testing.T) {
	const full = "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: full}, {Key: "vcs.modified", Value: "false"}}, "0123456"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: full}}, "0123456+dirty"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
	} {
		if got := revision(c.settings); got != c.want {
			t.Errorf("%v: %q, want %q", c.settings, got, c.want)
		}
	}
}

// TestString: the test binary has a revision or none, as go test stamped
// it. The release is the VERSION file's, maybe a pre-release such as -dev.
func TestString(t *testing.T) {
	re := regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)? \(rev (unknown|[0-9a-f]{7}(\+dirty)?), ` + regexp.QuoteMeta(runtime.Version()) + `\)$`)
	if s := String(); !re.MatchString(s) || s[:len(Version)] != Version {
		t.Errorf("String() = %q, want it to match %s", s, re)
	}
}
