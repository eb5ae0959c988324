//go:build robustness_durable

package main

// transactionalMethods is empty in the robustness suite's test build only
// (tag robustness_durable). Creates and cancels then take durable claims
// with leases, renewed while they run and taken over when they lapse. A
// paused worker and a takeover meet on that path. The transactional
// claims of every other build never take it. Never build a binary to
// serve with this tag; see transactional.go.
var transactionalMethods []string
