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
// On success each backend logs one line. It gives runs (and those with
// durable claims), operations, faults by kind, takeovers and superseded
// answers. It also gives releases (and those that released a key), intents
// stored, orphans and violations.
//
// go test runs a short version (make test); make robustness runs about ten
// minutes. PAYMENTSD_ROBUSTNESS_SEED replays a failing run's schedule.
// PAYMENTSD_ROBUSTNESS_RUNS and PAYMENTSD_ROBUSTNESS_DURATION size it.
// PAYMENTSD_ROBUSTNESS_OUT says where a failure's report goes.
package robustness
