-- One row per (scope, key): the claim and, once completed, the result.
CREATE TABLE idempotency_records (
    scope              text        COLLATE "C" NOT NULL, -- compared byte by byte: cheaper, and locale-proof
    key                text        COLLATE "C" NOT NULL,
    fingerprint        bytea       NOT NULL,
    fingerprint_scheme text        NOT NULL,
    state              smallint    NOT NULL CHECK (state IN (1, 2)), -- 1 in flight, 2 completed
    attempt            bigint      NOT NULL CHECK (attempt > 0),
    claim_token        bytea       NOT NULL,
    owner              text        NOT NULL,
    lease_us           bigint      NOT NULL, -- the lease a renewal extends by, in microseconds
    lease_expire_time  timestamptz,          -- null once completed
    expire_time        timestamptz NOT NULL,
    result             bytea,                -- an idempotency.v1.Result, once completed
    PRIMARY KEY (scope, key),
    CHECK ((state = 2) = (result IS NOT NULL))
);

-- The sweeper deletes expired records oldest first, in bounded batches,
-- without reading live ones.
CREATE INDEX idempotency_records_expire_time ON idempotency_records (expire_time);
