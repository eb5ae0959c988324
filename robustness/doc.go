// Package robustness holds paymentsd's robustness suite, in its tests. It
// runs the real binary, on bbolt and on three PostgreSQL replicas. Clients
// send it random operations over gRPC and HTTP/JSON. Meanwhile a seeded
// schedule of faults kills, pauses, cuts and slows it. Every operation is
// recorded. A linearizability checker (porcupine) checks the whole history
// against a small sequential model. The model covers the idempotency
// contract and an intent's life. Intents that no answer names (orphans) are
// counted at the end. The single-scenario fault tests of cmd/paymentsd each
// check the case they were written for. This suite looks for the bugs
// between those cases.
//
// Every other seed runs a binary built with the tag robustness_durable. Its
// creates and cancels take durable claims with leases. So a pause past the
// lease lets another replica take a claim over (takeover_test.go).
//
// Twice a run, the real binary's paymentsd release clears a key's stored
// error, and the corrected request follows (release_test.go). Creates that
// overlap the release may be answered from the released record. A
// PostgreSQL replica keeps that record in memory for up to a second
// (model_test.go, markStale).
//
// The message run (messages_test.go) drives examples/jetstream through a
// real nats-server. Alice and bob publish random create commands. About
// 30% are sent again under a new Nats-Msg-Id, past the broker's dedup.
// Some reuse a key with another body. A seeded schedule kills a consumer
// with SIGKILL and restarts it; the next fault waits until it consumes
// again. It pauses one past the 2s AckWait, so the broker redelivers. It
// restarts nats-server on the same port and store. On PostgreSQL two
// consumer processes share the durable consumer; on bbolt, one. At the
// end nothing is pending or unacked. Each key has one intent and one
// winning body, whose replies all carry that intent. Every other body is
// refused as IDEMPOTENCY_KEY_REUSED. No record is in flight. Without
// nats-server the run is skipped, and under CI=true it fails.
//
// On success each backend logs one line. It gives runs (and those with
// durable claims), operations, faults by kind, takeovers and superseded
// answers. It also gives releases (and those that released a key), intents
// stored, orphans and violations.
//
// go test runs a short version (make test); make robustness runs about
// twenty minutes. PAYMENTSD_ROBUSTNESS_SEED replays a failing run's schedule.
// PAYMENTSD_ROBUSTNESS_RUNS and PAYMENTSD_ROBUSTNESS_DURATION size it.
// PAYMENTSD_ROBUSTNESS_OUT says where a failure's report goes.
package robustness
