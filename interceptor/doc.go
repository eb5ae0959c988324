// Package interceptor makes unary gRPC methods run at most once per
// idempotency key, however often a client retries.
//
// A client names each operation with an `idempotency-key` request header.
// The key is 1 to 255 printable ASCII characters. It neither starts with a
// double quote nor starts or ends with a space. The client retries with the
// same key.
//
// For each keyed request, the interceptor does five things:
//
//   - It fingerprints the request: SHA-256 over the full method name and
//     the request's deterministic protobuf encoding.
//
//   - It claims (scope, key) in one atomic step of its Store.
//
//   - It runs the handler once.
//
//   - It stores the whole result. That is the response, or the full status
//     with its details, whatever its code. The header and trailer metadata
//     the handler set are stored too.
//
//   - It replays that result to every retry. A replay carries the header
//     `idempotent-replayed: true`.
//
// Each request meets one of five outcomes:
//
//   - Fresh: no live record. The handler runs and its result is stored.
//
//   - Replay: the same request completed. Its stored result is returned.
//
//   - In flight: the same request is running. The answer is ABORTED, with
//     ErrorInfo reason IDEMPOTENCY_KEY_IN_USE and a RetryInfo delay. The
//     delay is the method's usual handler time as this process has seen
//     it, at most 1s. It is 1s before the method has run, and never past
//     the lease left.
//
//   - Mismatch: the key was used for a different request. The answer is
//     FAILED_PRECONDITION, reason IDEMPOTENCY_KEY_REUSED.
//
//   - Takeover: the same request's lease ran out, so its worker presumably
//     died. The handler runs again as the next attempt. The superseded
//     worker cannot store its result. Its caller gets ABORTED, reason
//     IDEMPOTENCY_ATTEMPT_SUPERSEDED. One result per key leaves the server.
//
// The interceptor's own errors are never stored. These are UNAUTHENTICATED,
// INVALID_ARGUMENT for a missing or invalid key, in flight and mismatch. A
// client can then fix its request and retry with the same key. When the
// store cannot claim, the handler does not run. The caller gets UNAVAILABLE
// (DATA_LOSS if the store found its data damaged).
//
// The scope of a key comes from the caller's credential, never from the
// request. By default it is the SHA-256 of the bearer token (BearerScope).
// Use WithScope to key by an authenticated principal instead. A raw token
// is never stored.
//
// Header and trailer metadata the handler sets, SendHeader included, are
// held back. They are sent once the result is stored.
//
// # Transactions
//
// With a store that is a TxStore, the handler's context carries a Tx. The
// writes the handler makes through the store's repositories join it. They
// commit in the same transaction as the completion of the record: both or
// neither. A crash never leaves data that no key's answer names. The writes
// of a handler whose answer is an error are discarded. A failure of that
// transaction is not a result: nothing is stored, and the caller gets
// UNAVAILABLE.
//
// Declare with WithTransactional the methods whose only effects are such
// writes. Their claim's durability is storage.Transactional: it is not
// committed before the handler runs. Nothing outside the store happened,
// so a crash loses nothing. Claim, writes and result take one commit. A
// retry after a failure runs them afresh. Every other claim is
// storage.Durable, committed before the handler runs.
//
// A commit can fail with storage.ErrConflict: the data the handler read changed
// before its writes committed. Such a method then runs again at once, as if
// the requests had come one after the other. After 8 lost runs the caller
// gets ABORTED, reason IDEMPOTENCY_WRITE_CONFLICT, and nothing is stored.
//
// # Failures
//
// While the handler runs, its lease is renewed every third of a lease. So
// only a dead worker is ever taken over. A store used by one process at a
// time (Claimant.Exclusive) takes over claims left by an earlier process at
// once.
//
// The result of a method with a durable claim may fail to be stored. The
// caller then gets UNAVAILABLE and the record stays in flight. A retry
// takes it over after the lease. A call that ran is never forgotten.
// Results larger than WithMaxResultSize are replaced by a stored INTERNAL
// error.
//
// # Fingerprints
//
// Deterministic protobuf encoding is stable for one binary and schema. It
// is not stable across protobuf library versions or schema changes, such as
// a new field or a renumbered one. A retry served by a newer deployment may
// then see a mismatch for the same logical request. That is the safe way to
// be wrong, never the other way round. Unknown fields are kept in the
// encoding, so a field the server does not know still tells two requests
// apart.
//
// WithFingerprintExclude leaves out of the fingerprint the fields that vary
// between retries, such as a trace id. Each record keeps its
// FingerprintScheme, which names the excluded fields. Fingerprints of two
// schemes cannot be compared. A rolling deploy may change the exclusions.
// A retry that meets a record of the other scheme is then refused as a
// mismatch, with a message naming both schemes. It is never replayed or run
// again on a comparison that means nothing.
//
// # The packages beside this one
//
// Each serves one reader:
//
//   - once: the rules with no transport, for a message consumer or any
//     caller that is not a gRPC server. This package is its gRPC face.
//
//   - storage: the store contract, for those who write a store.
//     It holds Store, TxStore, Record, the claim rules in Decide and the
//     errors a store returns. Its conformance suite is storage/storagetest.
//
//   - interceptor/retry: the client half. It gives each call a key, keeps
//     it across attempts and retries what is safe to retry.
//
//   - wire: the metadata names, the ErrorInfo reasons and the
//     key rule. Both halves share them, and so does an HTTP face.
//
//   - interceptor/tracing: an Observer that puts each outcome on the
//     request's OpenTelemetry span.
//
// On the server, keep middleware that rewrites statuses inside (after) this
// interceptor. One outside would rewrite replays and in-flight answers too.
// Clients decide whether to retry from exactly those codes.
//
// UnaryServerInterceptor returns an error for options that cannot work. A
// method not named "/package.Service/Method" is one, and a lease not under
// the TTL another. MustUnaryServerInterceptor panics instead, for options
// fixed in code.
//
// # Streaming
//
// UnaryServerInterceptor is a unary interceptor. Streaming RPCs never pass
// through it. They are served untouched, with no idempotency.
package interceptor
