-- Dead letters the broker refused for good, kept with their whole context
-- and payload (see the PostgreSQL migration); times are Unix milliseconds,
-- causes and headers JSON text.
CREATE TABLE IF NOT EXISTS consumer_dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    handler          TEXT    NOT NULL,
    message_id       TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    error            TEXT    NOT NULL,
    causes           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    first_failure_at INTEGER NOT NULL,
    last_failure_at  INTEGER NOT NULL,
    destination      TEXT    NOT NULL,
    position         TEXT    NOT NULL,
    partition_key    TEXT    NULL,
    headers          TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    refusal          TEXT    NOT NULL,
    stored_at        INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS consumer_dead_letters_message ON consumer_dead_letters (handler, message_id);
CREATE INDEX IF NOT EXISTS consumer_dead_letters_stored ON consumer_dead_letters (stored_at);
