package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// runVersion is paymentsd version (and --version): what was built, from
// which revision, as the go command stamped it. A binary built outside a
// checkout, or with -buildvcs=false, has no revision to tell.
func runVersion(_ context.Context, sio *stdio, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(sio.err, "paymentsd version: takes no arguments, got %q\nusage: paymentsd version\n", args)
		return exitUsage
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(sio.out, "paymentsd (no build information)\ngo:        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	fmt.Fprintf(sio.out, "paymentsd %s\n", info.Main.Version)
	fmt.Fprintf(sio.out, "module:    %s\n", info.Main.Path)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(sio.out, "revision:  %s\n", rev)
		fmt.Fprintf(sio.out, "time:      %s\n", settings["vcs.time"])
		fmt.Fprintf(sio.out, "modified:  %s\n", settings["vcs.modified"])
	} else {
		fmt.Fprintln(sio.out, "revision:  unknown (built without version control information)")
	}
	fmt.Fprintf(sio.out, "go:        %s %s/%s\n", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	return exitOK
}
