-- The release history: one row per release of a key, with the operator
-- who made it and what the released record held. It is written in the
-- release's transaction, and swept with the records once expire_time has
-- passed (storage.ReleaseExpiry).
CREATE TABLE idempotency_releases (
    scope        text        COLLATE "C" NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    release_time timestamptz NOT NULL,
    released_by  text        NOT NULL,
    attempt      bigint      NOT NULL,
    code         integer     NOT NULL, -- the released stored error's gRPC code
    message      text        NOT NULL,
    expire_time  timestamptz NOT NULL
);

-- A key's releases, oldest first; and the sweep, oldest first.
CREATE INDEX idempotency_releases_key ON idempotency_releases (scope, key, release_time);
CREATE INDEX idempotency_releases_expire_time ON idempotency_releases (expire_time);

-- An operator's search for a key in every scope. The primary key leads
-- with the scope, so it cannot serve it: without this index the search
-- reads the whole table.
CREATE INDEX idempotency_records_key ON idempotency_records (key);
