//go:build robustness_durable

package main

// transactionalMethods is empty in the robustness suite's test build (tag
// robustness_durable) only, so that creates and cancels take durable claims
// with leases, renewed while they run and taken over when they lapse: the
// path a paused worker and a takeover meet, which the transactional claims
// of every other build never take. Never build a binary to serve with this
// tag; see transactional.go.
var transactionalMethods []string
