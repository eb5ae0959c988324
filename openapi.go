// Package paymentsd holds what the repository's programs embed from its top
// directory: the OpenAPI document that make generate writes under gen/,
// which no package below gen/ can embed since buf empties gen/ on each run.
package paymentsd

import _ "embed"

// OpenAPI is the OpenAPI 2.0 document of the HTTP/JSON API, generated from
// proto/ by protoc-gen-openapiv2.
//
//go:embed gen/payments/v1/payments.swagger.json
var OpenAPI []byte
