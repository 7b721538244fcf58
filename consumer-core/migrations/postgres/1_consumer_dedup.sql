-- Idempotency records: one row per (handler, key) that committed, written in
-- the handler's own transaction with INSERT ... ON CONFLICT DO NOTHING.
CREATE TABLE IF NOT EXISTS consumer_processed (
    handler      TEXT        NOT NULL,
    key          TEXT        NOT NULL,
    message_id   TEXT        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, key)
);
CREATE INDEX IF NOT EXISTS consumer_processed_at ON consumer_processed (processed_at);

-- Failed attempts, written outside the rolled-back business transaction, so
-- the attempt count survives a crash; dead_lettered_at makes a redelivered
-- message that was already dead-lettered settle without a second dead letter.
CREATE TABLE IF NOT EXISTS consumer_attempts (
    handler          TEXT        NOT NULL,
    message_id       TEXT        NOT NULL,
    attempts         INTEGER     NOT NULL,
    first_failure_at TIMESTAMPTZ NOT NULL,
    last_failure_at  TIMESTAMPTZ NOT NULL,
    last_error       TEXT        NOT NULL,
    dead_lettered_at TIMESTAMPTZ NULL,
    PRIMARY KEY (handler, message_id)
);
CREATE INDEX IF NOT EXISTS consumer_attempts_last ON consumer_attempts (last_failure_at);
