-- Scheduled outbox events (Outbox::schedule): kept apart until they fall
-- due, so they take no version in their aggregate's order and hold nothing
-- back. A relay moves each one into outbox_events once due_at has passed
-- (Outbox::release_due), in one transaction that gives it the aggregate's
-- next version: from then on it is an ordinary event enqueued at that
-- moment. Cancelling deletes the row here; once moved it is too late.
-- Times are Unix milliseconds.
ALTER TABLE outbox_events ADD COLUMN due_at INTEGER NULL;

CREATE TABLE IF NOT EXISTS outbox_events_scheduled (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    aggregate_type  TEXT    NOT NULL,
    aggregate_id    TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    destination     TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    headers         TEXT    NULL,
    trace_metadata  TEXT    NULL,
    created_at      INTEGER NOT NULL,
    due_at          INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_events_due ON outbox_events_scheduled (due_at, seq);
CREATE INDEX IF NOT EXISTS outbox_events_due_agg ON outbox_events_scheduled (aggregate_type, aggregate_id, due_at);
