//go:build !benchbaseline

package main

// benchBaseline is Config.WithoutIdempotency's default: false, but in the
// benchmark build (baseline.go).
const benchBaseline = false
