//go:build !robustness_broken

package once

// replayMismatch, when true, breaks one rule of the idempotency contract on
// purpose. A different request under a completed key gets the stored
// result replayed instead of IDEMPOTENCY_KEY_REUSED. Only the robustness
// suite's test build sets it (tag robustness_broken, rules_broken.go). It
// proves that the suite's checker reports a broken service. Every other
// build has this false, and the compiler drops the branch it guards.
const replayMismatch = false
