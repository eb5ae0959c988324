// Package once runs a function at most once per idempotency key, however
// often its caller retries. It holds the rules with no transport, for a
// message consumer or any caller that is not a gRPC server. Package
// interceptor is its gRPC face.
//
// A Guard works over one storage.Store. For each request it fingerprints
// the operation and the request, and claims (scope, key) atomically. It
// runs the function once and stores its result: a response, or an error
// as a google.rpc.Status. Every later call with the same request gets the
// stored result back, unchanged. Do takes protobuf messages, fingerprinted
// by their deterministic encoding; DoValue takes plain Go values,
// fingerprinted and stored as JSON. Both say, in Answered, whether the
// answer was a replay.
//
// An error is either the rules' or the function's. A *Refusal is the
// rules' answer, of one kind that errors.Is tells (ErrInFlight,
// ErrKeyReused, ...); nothing of the call was stored. Any other error is
// the function's, as stored: a *StoredError, or what Options.Statuses
// makes of it.
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
// together, or not at all.
package once
