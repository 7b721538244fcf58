-- Sagas (consumer::saga): one row per saga, its state and version loaded
-- and saved in the transaction that holds the message's dedup row and
-- every outbox row the transition writes (see the PostgreSQL migration).
-- Times are Unix milliseconds, JSON is stored as text.
CREATE TABLE IF NOT EXISTS consumer_sagas (
    saga_type    TEXT    NOT NULL,
    saga_id      TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    status       TEXT    NOT NULL,
    reason       TEXT    NULL,
    state        TEXT    NOT NULL,
    timeouts     TEXT    NOT NULL,
    compensation TEXT    NOT NULL,
    retries      TEXT    NOT NULL,
    history      TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    finished_at  INTEGER NULL,
    PRIMARY KEY (saga_type, saga_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS consumer_sagas_open ON consumer_sagas (saga_type, started_at)
    WHERE status IN ('running', 'compensating', 'compensation_failed');
CREATE INDEX IF NOT EXISTS consumer_sagas_finished ON consumer_sagas (finished_at)
    WHERE finished_at IS NOT NULL;
