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
// The Patroni run (patroni_test.go) puts the three replicas on a Patroni
// cluster (testkit/patroni: three etcd members, three PostgreSQL members
// in synchronous mode strict, TTL 10 s), through its multi-host URL. Its
// faults are the cluster's: the leader killed (its PostgreSQL, or in turn
// its Patroni, whose PostgreSQL runs on until that Patroni, started again,
// rewinds it), a switchover, the leader paused until another leads, and
// an etcd member killed. Each lasts until the cluster is healthy again and
// every replica has answered a write, so a run lasts five times the
// others' (60 s by default). Patroni before 3.0.3 (Debian 12 ships
// 3.0.2) may let a leader paused past the TTL, once woken, put its key
// back over the new leader's (patroni/patroni#2689), which leaves the
// cluster without a standby for good. So with such a Patroni the paused
// leader's Patroni is killed before SIGCONT and started again after it
// (the variant leader-pause/patroni-restart). One cluster serves every
// run. Without patroni or etcd the test is skipped, and under CI=true it
// fails.
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
// On success each run logs a line, and each backend one more. They give
// runs (and those with durable claims), operations, faults by kind (and
// their variants), takeovers and superseded answers. They also give
// releases (and those that released a key), intents stored, orphans and
// violations.
//
// go test runs a short version (make test); make robustness runs about
// half an hour. PAYMENTSD_ROBUSTNESS_SEED replays a failing run's
// schedule. PAYMENTSD_ROBUSTNESS_RUNS and PAYMENTSD_ROBUSTNESS_DURATION
// size it; PAYMENTSD_ROBUSTNESS_PATRONI_RUNS sets the Patroni runs apart
// (by default as many). PAYMENTSD_ROBUSTNESS_OUT says where a failure's
// report goes.
package robustness
