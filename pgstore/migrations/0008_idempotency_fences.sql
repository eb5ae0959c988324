-- A fence closes one scope on this database: its records and the
-- embedder's data of it now live on another database (a pod's principal
-- moved to another pod). While its row is here, no claim of the scope is
-- taken and no durable claim of it is completed: each refuses, and the
-- caller is told to retry, to be routed where the scope now lives.
--
-- A claim holds the scope's fence lock shared (an advisory lock, see
-- pgstore.FenceLock) from its look until its commit; Fence takes it
-- exclusive to write the row. So a fence waits for the claims in progress
-- and commits after them, and every claim after it sees the row.
CREATE TABLE idempotency_fences (
    scope      text        COLLATE "C" PRIMARY KEY,
    fence_time timestamptz NOT NULL DEFAULT clock_timestamp(),
    note       text        NOT NULL DEFAULT ''
);

-- idempotency_complete with p_fence, the scope's fence lock: it waits for
-- a fence being written, and raises SQLSTATE PI002 when the scope is
-- fenced, storing nothing. The claim stays in flight here; its copy on the
-- scope's new database is taken over there once its lease ends.
CREATE FUNCTION idempotency_complete(p_scope text, p_key text, p_attempt bigint, p_token bytea,
                                     p_result bytea, p_notice text, p_fence bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(p_fence);
    IF EXISTS (SELECT 1 FROM idempotency_fences WHERE scope = p_scope) THEN
        RAISE EXCEPTION 'idempotency scope fenced: it lives on another database now' USING ERRCODE = 'PI002';
    END IF;
    PERFORM idempotency_complete(p_scope, p_key, p_attempt, p_token, p_result, p_notice);
END
$$;
