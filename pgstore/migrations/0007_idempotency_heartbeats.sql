-- One row per paymentsd process, written by its health probe each second
-- when the server has a synchronous standby. The write's commit waits for
-- the standby, as a create's does. A server whose standby does not confirm
-- it is reported unhealthy: an old primary left running after a failover,
-- or one whose only standby is down. Rows of processes gone for a day are
-- swept.
CREATE TABLE idempotency_heartbeats (
    claimant  text        COLLATE "C" PRIMARY KEY,
    beat_time timestamptz NOT NULL
);
