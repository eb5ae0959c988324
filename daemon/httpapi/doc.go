// Package httpapi is the HTTP/JSON face of payments.v1.PaymentIntentService.
// It is built with grpc-gateway and implements no rule of its own.
// Every call becomes a gRPC call to the real server (see Dial).
// So authentication, idempotency, logging and metrics decide HTTP calls
// exactly as they decide gRPC ones, over one set of records.
// A gRPC call and an HTTP call with the same key and content are the same
// request.
//
// What it adds is the translation HTTP clients expect:
//
//   - Authorization and Idempotency-Key become the metadata the
//     interceptors read. The key may be bare, or an RFC 8941 string as in
//     the IETF draft. Only Idempotent-Replayed and Idempotency-Expires-At
//     come back as headers.
//
//   - A create answers 201 Created with Location. A replay answers the
//     same status, headers and body bytes.
//
//   - Errors are application/problem+json (RFC 9457) with a stable "error"
//     code. Each has the status an HTTP client expects. A reused key is
//     422, and a key in flight is 409 with Retry-After. A caller not
//     authenticated gets 401 with WWW-Authenticate.
//
//   - Bodies are JSON of at most 1 MiB, with no unknown fields.
package httpapi
