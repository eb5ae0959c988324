//go:build !benchnolimits

package main

// benchNoLimits is Config.WithoutLimits's default: false, but in the
// benchmark build (nolimits.go).
const benchNoLimits = false
