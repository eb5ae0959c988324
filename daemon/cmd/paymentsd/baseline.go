//go:build benchbaseline

package main

// benchBaseline is Config.WithoutIdempotency's default. Built with -tags
// benchbaseline for `make bench` only: the same server, store and wiring,
// without the idempotency interceptor, to measure what it costs.
const benchBaseline = true
