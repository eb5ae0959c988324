// Package interceptor makes unary gRPC methods run at most once per
// idempotency key, however often a client retries.
//
// A client names each operation with an `idempotency-key` request header (1
// to 255 printable ASCII characters, neither starting with a double quote
// nor starting or ending with a space) and retries with the same key. The
// interceptor fingerprints the request (SHA-256 over the full method name
// and the request's deterministic protobuf encoding), claims (scope, key)
// in one atomic step of its Store, runs the handler once, stores the whole
// result — the response, or the full status with its details, whatever its
// code, plus the header and trailer metadata the handler set — and replays
// that result to every retry with the header `idempotent-replayed: true`.
//
// Each request meets one of five outcomes:
//
//   - fresh: no live record; the handler runs and its result is stored.
//   - replay: the same request completed; its stored result is returned.
//   - in flight: the same request is running; ABORTED with ErrorInfo reason
//     IDEMPOTENCY_KEY_IN_USE and a RetryInfo delay: the method's usual
//     handler time as this process has seen it (1s before it has run),
//     never past the lease left.
//   - mismatch: the key was used for a different request;
//     FAILED_PRECONDITION, reason IDEMPOTENCY_KEY_REUSED.
//   - takeover: the same request's lease ran out (its worker presumably
//     died); the handler runs again as the next attempt. The superseded
//     worker cannot store its result: its caller gets ABORTED, reason
//     IDEMPOTENCY_ATTEMPT_SUPERSEDED. One result per key leaves the server.
//
// The interceptor's own errors (UNAUTHENTICATED, INVALID_ARGUMENT for a
// missing or invalid key, in flight, mismatch) are never stored, so a client
// can fix its request and retry with the same key. When the store cannot
// claim, the handler does not run and the caller gets UNAVAILABLE.
//
// The scope of a key comes from the caller's credential, never from the
// request: by default the SHA-256 of its bearer token (BearerScope); use
// WithScope to key by an authenticated principal instead. A raw token is
// never stored.
//
// Header and trailer metadata the handler sets, SendHeader included, are
// held back and sent once the result is stored.
//
// # Transactions
//
// With a store that is a TxStore, the handler's context carries a Tx: the
// writes the handler makes through the store's repositories join it, and
// commit in the same transaction as the completion of its record, both or
// neither, so a crash never leaves data that no key's answer names. The
// writes of a handler whose answer is an error are discarded. A failure of
// that transaction is not a result: nothing is stored and the caller gets
// UNAVAILABLE. Methods declared WithTransactional, whose only effects are
// such writes, have a claim that is not durable before the handler runs:
// nothing outside the store happened, so a crash loses nothing, and claim,
// writes and result take one commit. A retry after a failure runs them
// afresh. A commit that fails with ErrConflict (the data the handler read
// changed before its writes committed) runs such a method again at once,
// as if the requests had come one after the other; after 8 lost runs the
// caller gets ABORTED, reason IDEMPOTENCY_WRITE_CONFLICT, nothing stored.
//
// # Failures
//
// While the handler runs, its lease is renewed every third of a lease, so
// only a dead worker is ever taken over. A store used by one process at a
// time (Claimant.Exclusive) takes over claims left by an earlier process at
// once. When the result of a method with a durable claim cannot be stored,
// the caller gets UNAVAILABLE and the record stays in flight, to be taken
// over by a retry after the lease: a call that ran is never forgotten.
// Results larger than WithMaxResultSize are replaced by a stored INTERNAL
// error.
//
// # Fingerprints
//
// Deterministic protobuf encoding is stable for one binary and schema, not
// across protobuf library versions or schema changes (a new field, a
// renumbered one): a retry served by a newer deployment may see a mismatch
// for the same logical request, which is the safe way to be wrong, never
// the other way round. Unknown fields are kept in the encoding, so a field
// the server does not know still tells two requests apart.
//
// WithFingerprintExclude leaves fields that vary between retries (a trace
// id) out of the fingerprint. Each record keeps its FingerprintScheme,
// which names the excluded fields: fingerprints of two schemes cannot be
// compared, so during a rolling deploy that changes the exclusions, a
// retry meeting a record of the other scheme is refused as a mismatch, with
// a message naming both, instead of being replayed or run again on a
// comparison that means nothing.
//
// # The packages beside this one
//
// Each serves one reader:
//
//   - interceptor/storage: the store contract (Store, TxStore, Record, the
//     claim rules in Decide, the errors a store returns), for those who
//     write a store; storage/storagetest is its conformance suite.
//   - interceptor/retry: the client half, which gives each call a key,
//     keeps it across attempts and retries what is safe to retry.
//   - interceptor/wire: the metadata names, the ErrorInfo reasons and the
//     key rule, shared by both halves and by an HTTP face.
//   - interceptor/tracing: an Observer that puts each outcome on the
//     request's OpenTelemetry span.
//
// On the server, keep middleware that rewrites statuses inside (after)
// this interceptor: one outside would rewrite replays and in-flight answers
// too, and clients decide whether to retry from exactly those codes.
//
// UnaryServerInterceptor returns an error for options that cannot work (a
// method not named "/package.Service/Method", a lease not under the TTL); MustUnaryServerInterceptor panics instead, for options fixed in code.
//
// # Streaming
//
// UnaryServerInterceptor is a unary interceptor: streaming RPCs never pass
// through it and are served untouched, with no idempotency.
package interceptor
