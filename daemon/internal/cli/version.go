package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/paymentsd/paymentsd/daemon/internal/version"
)

// Version is the version subcommand of program name. Its first line names
// the release, revision and Go version, for a bug report or a script:
// "paymentsd v0.4.0 (rev abc1234, go1.26.8)". The lines after it say the
// rest of what the go command stamped. A binary built outside a checkout,
// or with -buildvcs=false, has no revision to tell.
func Version(name string) func(ctx context.Context, sio *Stdio, args []string) int {
	return func(_ context.Context, sio *Stdio, args []string) int {
		if len(args) > 0 {
			fmt.Fprintf(sio.Err, "%s version: takes no arguments, got %q\nusage: %[1]s version\n", name, args)
			return ExitUsage
		}
		fmt.Fprintf(sio.Out, "%s %s\n", name, version.String())
		info, ok := debug.ReadBuildInfo()
		if !ok {
			fmt.Fprintf(sio.Out, "go:        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return ExitOK
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		fmt.Fprintf(sio.Out, "module:    %s %s\n", info.Main.Path, info.Main.Version)
		if rev := settings["vcs.revision"]; rev != "" {
			fmt.Fprintf(sio.Out, "revision:  %s\n", rev)
			fmt.Fprintf(sio.Out, "time:      %s\n", settings["vcs.time"])
			fmt.Fprintf(sio.Out, "modified:  %s\n", settings["vcs.modified"])
		} else {
			fmt.Fprintln(sio.Out, "revision:  unknown (built without version control information)")
		}
		fmt.Fprintf(sio.Out, "go:        %s %s/%s\n", info.GoVersion, runtime.GOOS, runtime.GOARCH)
		return ExitOK
	}
}
