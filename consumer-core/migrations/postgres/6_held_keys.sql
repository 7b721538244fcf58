-- Sequenced dead letters: a handler that holds keys (`on_dead_letter =
-- hold_key`) sets a key aside when one of its messages is dead-lettered,
-- and parks the key's later messages here, in arrival order, until an
-- operator releases or skips the head; then the consumer runs them in
-- order (see the runtime's `held` module).
--
-- status: 'held' (waiting for an operator), 'released' (to be drained),
-- 'draining' (a consumer, `drainer`, runs its parked messages, under a
-- lease until `lease_until`). next_seq is the sequence number the next
-- parked message takes: parking increments it under the row's lock, so a
-- drain that found no parked message deletes the hold only if next_seq
-- has not moved since.
CREATE TABLE IF NOT EXISTS consumer_held_keys (
    handler         TEXT        NOT NULL,
    key             TEXT        NOT NULL,
    head_message_id TEXT        NOT NULL,
    reason          TEXT        NOT NULL,
    status          TEXT        NOT NULL,
    next_seq        BIGINT      NOT NULL,
    drainer         TEXT        NULL,
    lease_until     TIMESTAMPTZ NULL,
    held_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, key)
);
CREATE INDEX IF NOT EXISTS consumer_held_keys_status ON consumer_held_keys (handler, status);

-- The messages of a held key, the dead-lettered head first (the lowest
-- seq): headers as the dead-letter table writes them, payload whole.
CREATE TABLE IF NOT EXISTS consumer_parked (
    handler     TEXT        NOT NULL,
    key         TEXT        NOT NULL,
    seq         BIGINT      NOT NULL,
    message_id  TEXT        NOT NULL,
    destination TEXT        NOT NULL,
    position    TEXT        NOT NULL,
    headers     JSONB       NOT NULL,
    payload     BYTEA       NOT NULL,
    parked_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, key, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS consumer_parked_message ON consumer_parked (handler, message_id);
