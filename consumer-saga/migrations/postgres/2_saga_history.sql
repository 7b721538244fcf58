-- A saga's history as rows of its own: one per transition, keyed by the
-- version it wrote, appended in the statement that saves the saga's row at
-- that version, and pruned there by version to the saga's history limit
-- (SagaBuilder::with_history_limit). Until now the history was a JSON
-- column of consumer_sagas, rewritten whole at every transition.
CREATE TABLE IF NOT EXISTS consumer_saga_history (
    saga_type  TEXT        NOT NULL,
    saga_id    TEXT        NOT NULL,
    version    BIGINT      NOT NULL,
    event_type TEXT        NOT NULL,
    message_id TEXT        NOT NULL,
    status     TEXT        NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    note       TEXT        NULL,
    PRIMARY KEY (saga_type, saga_id, version)
);
-- The entries of the sagas there are move here. The column stays, empty
-- and no longer read, so that a process of the previous version still
-- running during an upgrade can save (what it writes there is not shown);
-- a later version drops it.
INSERT INTO consumer_saga_history
    (saga_type, saga_id, version, event_type, message_id, status, at, note)
SELECT s.saga_type, s.saga_id, (e->>'version')::bigint, e->>'event_type', e->>'message_id',
       e->>'status', to_timestamp((e->>'at_ms')::double precision / 1000), e->>'note'
FROM consumer_sagas s, jsonb_array_elements(s.history) e
ON CONFLICT DO NOTHING;
UPDATE consumer_sagas SET history = '[]'::jsonb WHERE history <> '[]'::jsonb;
