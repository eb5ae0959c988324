-- Whether a transactional method stored the record: its writes committed
-- with its result, so a stored error of it kept none and may be released.
-- Records stored before read false, the side on which nothing is released.
ALTER TABLE idempotency_records ADD COLUMN transactional boolean NOT NULL DEFAULT false;
