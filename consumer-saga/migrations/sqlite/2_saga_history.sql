-- A saga's history as rows of its own (see the PostgreSQL migration).
-- Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_saga_history (
    saga_type  TEXT    NOT NULL,
    saga_id    TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    event_type TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    note       TEXT    NULL,
    PRIMARY KEY (saga_type, saga_id, version)
) WITHOUT ROWID;
-- The entries of the sagas there are move here; the column stays, empty
-- and no longer read (see the PostgreSQL migration).
INSERT OR IGNORE INTO consumer_saga_history
    (saga_type, saga_id, version, event_type, message_id, status, at, note)
SELECT s.saga_type, s.saga_id, json_extract(e.value, '$.version'),
       json_extract(e.value, '$.event_type'), json_extract(e.value, '$.message_id'),
       json_extract(e.value, '$.status'), json_extract(e.value, '$.at_ms'),
       json_extract(e.value, '$.note')
FROM consumer_sagas s, json_each(s.history) e;
UPDATE consumer_sagas SET history = '[]' WHERE history <> '[]';
