//go:build benchbaseline

package main

// Built with -tags benchbaseline for `make bench` only: the same server,
// store and wiring, without the idempotency interceptor.
func init() { benchWithoutIdempotency = true }
