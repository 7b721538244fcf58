-- Scheduled outbox events (Outbox::schedule): kept apart until they fall
-- due, so they take no version in their aggregate's order and hold nothing
-- back. A relay moves each one into outbox_events once due_at has passed
-- (Outbox::release_due), in one transaction that gives it the aggregate's
-- next version: from then on it is an ordinary event enqueued at that
-- moment. Cancelling deletes the row here; once moved it is too late.
CREATE TABLE IF NOT EXISTS outbox_events_scheduled (
    id             UUID         PRIMARY KEY,
    seq            BIGSERIAL    NOT NULL,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    destination    TEXT         NOT NULL,
    payload        JSONB        NOT NULL,
    headers        JSONB        NULL,
    trace_metadata JSONB        NULL,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT now(),
    due_at         TIMESTAMPTZ  NOT NULL
);
-- The relay's probe (the earliest due_at) and the release, in due order.
CREATE INDEX IF NOT EXISTS outbox_events_due ON outbox_events_scheduled (due_at, seq);
-- What one aggregate (a saga) has scheduled.
CREATE INDEX IF NOT EXISTS outbox_events_due_agg ON outbox_events_scheduled (aggregate_type, aggregate_id, due_at);

-- When a released event fell due (NULL for events enqueued to go at once):
-- its CloudEvents time, and where its publish delay is measured from.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS due_at TIMESTAMPTZ NULL;
