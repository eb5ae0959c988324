// Package paymentsd holds what the repository's programs embed from its top
// directory. These are files that make generate writes under gen/, and
// VERSION. No package below gen/ can embed the former, since buf empties
// gen/ on each run. No package below the top can embed VERSION at all.
package paymentsd

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
