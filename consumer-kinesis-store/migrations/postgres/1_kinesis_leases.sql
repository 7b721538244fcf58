-- Kinesis leases and checkpoints (consumer-kinesis-store): one row per
-- shard of a stream read by an application. A lease is held by `owner`
-- until `expires_at` (the database's clock); `counter` grows with every
-- take, renewal and release, so that of two instances racing for a lease
-- exactly one wins. `checkpoint` is the last sequence number settled with
-- every earlier one, or SHARD_END once a closed shard is read to its end.
CREATE TABLE IF NOT EXISTS consumer_kinesis_leases (
    application TEXT        NOT NULL,
    stream      TEXT        NOT NULL,
    shard_id    TEXT        NOT NULL,
    owner       TEXT        NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    counter     BIGINT      NOT NULL,
    checkpoint  TEXT        NULL,
    PRIMARY KEY (application, stream, shard_id)
);
