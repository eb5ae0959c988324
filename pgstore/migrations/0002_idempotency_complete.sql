-- idempotency_complete stores the result of a claim, provided the claim is
-- still the stored one, and raises otherwise (SQLSTATE PI001), so that a
-- COMMIT sent in the same round trip never commits a handler's writes
-- beside a superseded claim: the error aborts the transaction first. With
-- a notice, processes waiting for the key hear of it once it commits.
CREATE FUNCTION idempotency_complete(p_scope text, p_key text, p_attempt bigint, p_token bytea,
                                     p_result bytea, p_notice text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_records SET state = 2, lease_expire_time = NULL, result = p_result
    WHERE scope = p_scope AND key = p_key AND state = 1 AND attempt = p_attempt AND claim_token = p_token;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency claim superseded' USING ERRCODE = 'PI001';
    END IF;
    IF p_notice IS NOT NULL THEN
        PERFORM pg_notify('idempotency_claim_ended', p_notice);
    END IF;
END
$$;
