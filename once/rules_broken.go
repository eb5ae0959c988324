//go:build robustness_broken

package once

// replayMismatch is true in the robustness suite's broken build only. See
// rules.go. Never build a binary to serve with this tag.
const replayMismatch = true
