-- Idempotency records; times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_processed (
    handler      TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (handler, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS consumer_processed_at ON consumer_processed (processed_at);

CREATE TABLE IF NOT EXISTS consumer_attempts (
    handler          TEXT    NOT NULL,
    message_id       TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    first_failure_at INTEGER NOT NULL,
    last_failure_at  INTEGER NOT NULL,
    last_error       TEXT    NOT NULL,
    dead_lettered_at INTEGER NULL,
    PRIMARY KEY (handler, message_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS consumer_attempts_last ON consumer_attempts (last_failure_at);
