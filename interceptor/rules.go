//go:build !robustness_broken

package interceptor

// replayMismatch, when true, breaks one rule of the idempotency contract on
// purpose: a different request under a completed key gets the stored
// result replayed instead of IDEMPOTENCY_KEY_REUSED. Only the robustness
// suite's test build (tag robustness_broken, rules_broken.go) sets it, to
// prove that its checker reports a broken service; every other build has
// this false, and the compiler drops the branch it guards.
const replayMismatch = false
