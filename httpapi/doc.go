// Package httpapi is the HTTP/JSON face of payments.v1.PaymentIntentService,
// built with grpc-gateway. It implements no rule of its own: every call is
// turned into a gRPC call to the real server (see Dial), so that
// authentication, idempotency, logging and metrics decide HTTP calls exactly
// as they decide gRPC ones, over one set of records. A gRPC call and an HTTP
// call with the same key and the same content are the same request.
//
// What it adds is the translation HTTP clients expect:
//
//   - Authorization and Idempotency-Key (bare, or an RFC 8941 string as in
//     the IETF draft) become the metadata the interceptors read; only
//     Idempotent-Replayed and Idempotency-Expires-At come back as headers.
//   - A create answers 201 Created with Location; a replay answers the same
//     status, headers and body bytes.
//   - Errors are application/problem+json (RFC 9457) with a stable "error"
//     code, and the status an HTTP client expects: 422 for a reused key,
//     409 + Retry-After for one in flight, 401 + WWW-Authenticate, ...
//   - Bodies are JSON of at most 1 MiB, with no unknown fields.
package httpapi
