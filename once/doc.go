// Package once runs a function at most once per idempotency key, however
// often its caller retries. It holds the rules with no transport, for a
// message consumer or any caller that is not a gRPC server. Package
// interceptor is its gRPC face.
//
// A Guard works over one storage.Store. For each request it fingerprints
// the operation and the message's deterministic encoding, and claims
// (scope, key) atomically. It runs the function once and stores its
// result: a message, or an error as a google.rpc.Status. Every later call
// with the same request gets the stored result back, unchanged.
//
// The outcomes are those of the interceptor:
//
//   - Another request under the key is refused: FAILED_PRECONDITION,
//     reason IDEMPOTENCY_KEY_REUSED.
//
//   - A call that meets the first one running is refused with ABORTED,
//     reason IDEMPOTENCY_KEY_IN_USE, and a retry delay. With
//     Options.InFlightWait it waits for the first one's result instead.
//
//   - A run whose worker died is taken over once its lease ends, as the
//     next attempt. The dead worker's result is refused.
//
// With Request.Transactional, on a storage.TxStore, the function runs
// inside the store's transaction. Its writes and the record commit
// together, or not at all. See docs/embedding.md for a consumer.
package once
