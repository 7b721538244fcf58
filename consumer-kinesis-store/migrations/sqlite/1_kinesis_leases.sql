-- Kinesis leases and checkpoints (consumer-kinesis-store); see the
-- PostgreSQL migration. Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_kinesis_leases (
    application TEXT    NOT NULL,
    stream      TEXT    NOT NULL,
    shard_id    TEXT    NOT NULL,
    owner       TEXT    NULL,
    expires_at  INTEGER NOT NULL,
    counter     INTEGER NOT NULL,
    checkpoint  TEXT    NULL,
    PRIMARY KEY (application, stream, shard_id)
) WITHOUT ROWID;
