-- When the attempt that made a claim began: a claim's age, for operators.
-- Rows stored before read null.
ALTER TABLE idempotency_records ADD COLUMN claim_time timestamptz;

-- The claims in flight, in key order, for the operator's paged list: an
-- entry per claim stored in flight (a durable claim), none for a completed
-- record. A transactional create inserts its record completed, so it
-- never writes an entry. Building it reads the table once, under a lock
-- that holds writes back meanwhile.
CREATE INDEX idempotency_records_in_flight ON idempotency_records (scope, key) WHERE state = 1;
