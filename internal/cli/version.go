package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the version subcommand of program name: what was built, from
// which revision, as the go command stamped it. A binary built outside a
// checkout, or with -buildvcs=false, has no revision to tell.
func Version(name string) func(ctx context.Context, sio *Stdio, args []string) int {
	return func(_ context.Context, sio *Stdio, args []string) int {
		if len(args) > 0 {
			fmt.Fprintf(sio.Err, "%s version: takes no arguments, got %q\nusage: %[1]s version\n", name, args)
			return ExitUsage
		}
		info, ok := debug.ReadBuildInfo()
		if !ok {
			fmt.Fprintf(sio.Out, "%s (no build information)\ngo:        %s %s/%s\n", name, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return ExitOK
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		fmt.Fprintf(sio.Out, "%s %s\n", name, info.Main.Version)
		fmt.Fprintf(sio.Out, "module:    %s\n", info.Main.Path)
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
