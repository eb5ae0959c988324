// Package version says which build of paymentsd this is. It gives the
// release from the VERSION file, embedded so a plain go build or go
// install stamps it. It also gives the revision and Go version the go
// command recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/paymentsd/paymentsd"
)

// Version is the VERSION file's first line: a release, "v0.4.0", or
// between releases a pre-release of the next, "v0.5.0-dev".
var Version = strings.TrimSpace(paymentsd.VersionFile)

// String returns the build in one line: "v0.4.0 (rev abc1234, go1.26.8)".
// The command paymentsd version prints it after the program's name.
func String() string {
	return fmt.Sprintf("%s (rev %s, %s)", Version, Revision(), runtime.Version())
}

// Revision returns the first 7 hex digits of the commit the binary was
// built from. It adds "+dirty" when the tree had changes. It returns
// "unknown" for a binary built without version control information. Such a
// binary was built outside a checkout, with -buildvcs=false, or by go
// install of a module version, which the release already names.
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return revision(info.Settings)
}

func revision(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}
