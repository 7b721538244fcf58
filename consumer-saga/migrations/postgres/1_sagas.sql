-- Sagas (consumer::saga): one row per saga, its state and version loaded
-- and saved in the transaction that holds the message's dedup row and
-- every outbox row the transition writes. A transition saves with
-- `UPDATE ... WHERE version = <the version it loaded>`: no row updated
-- means another transaction changed the saga first, and the transition
-- runs again on the new version. A finished saga stays as a tombstone
-- until the store's retention ends (Store::purge), so a late event is
-- recognised. JSON columns: the timeouts it waits for (tokens of
-- outbox_events_scheduled rows), its compensation log, its step retries,
-- its last transitions.
CREATE TABLE IF NOT EXISTS consumer_sagas (
    saga_type    TEXT        NOT NULL,
    saga_id      TEXT        NOT NULL,
    version      BIGINT      NOT NULL,
    status       TEXT        NOT NULL,
    reason       TEXT        NULL,
    state        JSONB       NOT NULL,
    timeouts     JSONB       NOT NULL,
    compensation JSONB       NOT NULL,
    retries      JSONB       NOT NULL,
    history      JSONB       NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at  TIMESTAMPTZ NULL,
    PRIMARY KEY (saga_type, saga_id)
);
-- What SagaMonitor's gauges and `consumer sagas list` read: the sagas
-- still open (active, or waiting for an operator), oldest first.
CREATE INDEX IF NOT EXISTS consumer_sagas_open ON consumer_sagas (saga_type, started_at)
    WHERE status IN ('running', 'compensating', 'compensation_failed');
-- What the purge reads: tombstones by age.
CREATE INDEX IF NOT EXISTS consumer_sagas_finished ON consumer_sagas (finished_at)
    WHERE finished_at IS NOT NULL;
