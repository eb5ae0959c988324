package paymentsd

import _ "embed"

// VersionFile is the VERSION file: the release this tree is. The package
// internal/version stamps it into every binary built from the tree, go
// build and go install alike, without -ldflags.
//
//go:embed VERSION
var VersionFile string
