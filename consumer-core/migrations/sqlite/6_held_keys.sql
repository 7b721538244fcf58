-- Sequenced dead letters (see the PostgreSQL migration); times are Unix
-- milliseconds, headers JSON text.
CREATE TABLE IF NOT EXISTS consumer_held_keys (
    handler         TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    head_message_id TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    next_seq        INTEGER NOT NULL,
    drainer         TEXT    NULL,
    lease_until     INTEGER NULL,
    held_at         INTEGER NOT NULL,
    PRIMARY KEY (handler, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS consumer_held_keys_status ON consumer_held_keys (handler, status);

CREATE TABLE IF NOT EXISTS consumer_parked (
    handler     TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    message_id  TEXT    NOT NULL,
    destination TEXT    NOT NULL,
    position    TEXT    NOT NULL,
    headers     TEXT    NOT NULL,
    payload     BLOB    NOT NULL,
    parked_at   INTEGER NOT NULL,
    PRIMARY KEY (handler, key, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS consumer_parked_message ON consumer_parked (handler, message_id);
