package paymentsd

import _ "embed"

// VersionFile is the VERSION file: the release this tree is, which
// internal/version stamps into every binary built from it, go build and
// go install alike, without -ldflags.
//
//go:embed VERSION
var VersionFile string
