-- Dead letters the broker refused for good (no dead-letter destination, not
-- authorised, too large even without the payload): kept here, payload
-- included, with the whole context, and written in the same transaction as
-- the dead-letter mark in consumer_attempts, so the original is settled
-- only once the letter is here and nothing the consumer gave up on is lost.
CREATE TABLE IF NOT EXISTS consumer_dead_letters (
    id               BIGSERIAL   PRIMARY KEY,
    handler          TEXT        NOT NULL,
    message_id       TEXT        NOT NULL,
    kind             TEXT        NOT NULL,
    error            TEXT        NOT NULL,
    -- The error's source() chain, outermost first: a JSON array of strings.
    causes           JSONB       NOT NULL,
    attempts         INTEGER     NOT NULL,
    first_failure_at TIMESTAMPTZ NOT NULL,
    last_failure_at  TIMESTAMPTZ NOT NULL,
    destination      TEXT        NOT NULL,
    position         TEXT        NOT NULL,
    partition_key    TEXT        NULL,
    -- Every original header in order: [{"name": .., "value": ..}], with
    -- "value_hex" instead of "value" for a value that is not UTF-8.
    headers          JSONB       NOT NULL,
    payload          BYTEA       NOT NULL,
    -- Why the letter is here and not on the broker.
    refusal          TEXT        NOT NULL,
    stored_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS consumer_dead_letters_message ON consumer_dead_letters (handler, message_id);
CREATE INDEX IF NOT EXISTS consumer_dead_letters_stored ON consumer_dead_letters (stored_at);
