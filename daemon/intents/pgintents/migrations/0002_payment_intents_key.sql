-- The idempotency key that created the intent, for operators who hold
-- an intent's id and ask which request made it. Rows stored before it
-- was kept, and intents created without a key, read null.
ALTER TABLE payment_intents ADD COLUMN idempotency_key text;
