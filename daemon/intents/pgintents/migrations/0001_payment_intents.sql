-- One row per intent, keyed by its id: ids are unique across owners, so a
-- taken id is refused whoever holds it.
CREATE TABLE payment_intents (
    id             text COLLATE "C" PRIMARY KEY, -- "C": ids sort bytewise, as in the cursor
    owner          text   NOT NULL,
    create_time_ns bigint NOT NULL, -- create_time in ns since the Unix epoch, as created: the paging order
    intent         bytea  NOT NULL  -- payments.v1.PaymentIntent, deterministic protobuf encoding
);

-- Listing pages through an owner's intents in creation order, then id: a
-- keyset scan of this index that needs no sort and skips nothing.
CREATE INDEX payment_intents_owner_order ON payment_intents (owner, create_time_ns, id);
