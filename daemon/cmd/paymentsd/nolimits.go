//go:build benchnolimits

package main

// benchNoLimits is Config.WithoutLimits's default. Built with -tags
// benchnolimits for `make bench` only: the same server without the bounds
// on connections, calls and header blocks, to measure what they cost.
const benchNoLimits = true
