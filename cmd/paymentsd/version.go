package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/paymentsd/paymentsd/internal/cli"
)

// runVersion is paymentsd version (and --version): what was built, from
// which revision, as the go command stamped it. A binary built outside a
// checkout, or with -buildvcs=false, has no revision to tell.
func runVersion(_ context.Context, sio *cli.Stdio, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(sio.Err, "paymentsd version: takes no arguments, got %q\nusage: paymentsd version\n", args)
		return cli.ExitUsage
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(sio.Out, "paymentsd (no build information)\ngo:        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return cli.ExitOK
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	fmt.Fprintf(sio.Out, "paymentsd %s\n", info.Main.Version)
	fmt.Fprintf(sio.Out, "module:    %s\n", info.Main.Path)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(sio.Out, "revision:  %s\n", rev)
		fmt.Fprintf(sio.Out, "time:      %s\n", settings["vcs.time"])
		fmt.Fprintf(sio.Out, "modified:  %s\n", settings["vcs.modified"])
	} else {
		fmt.Fprintln(sio.Out, "revision:  unknown (built without version control information)")
	}
	fmt.Fprintf(sio.Out, "go:        %s %s/%s\n", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	return cli.ExitOK
}
