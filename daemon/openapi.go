// Package daemon holds what the service's programs embed: files that make
// generate writes under daemon/gen/. No package below gen/ can embed them,
// since buf empties it on each run.
package daemon

import _ "embed"

// OpenAPI is the OpenAPI 2.0 document of the HTTP/JSON API, generated from
// proto/ by protoc-gen-openapiv2.
//
//go:embed gen/payments/v1/payments.swagger.json
var OpenAPI []byte

// Descriptors is a FileDescriptorSet of proto/, with the comments (source
// info) that the descriptors compiled into gen/ leave out. The server
// reflection of paymentsd serves it, so that grpcurl describe shows them.
//
//go:embed gen/descriptors.binpb
var Descriptors []byte
