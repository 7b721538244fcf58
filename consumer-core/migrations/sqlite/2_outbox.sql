-- Transactional outbox (the standard's outbox_events, plus what the relay
-- needs); times are Unix milliseconds, JSON is stored as text.
CREATE TABLE IF NOT EXISTS outbox_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    aggregate_type  TEXT    NOT NULL,
    aggregate_id    TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    destination     TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    headers         TEXT    NULL,
    trace_metadata  TEXT    NULL,
    created_at      INTEGER NOT NULL,
    published_at    INTEGER NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NULL,
    last_error      TEXT    NULL,
    failed_at       INTEGER NULL,
    UNIQUE (aggregate_type, aggregate_id, version)
);
CREATE INDEX IF NOT EXISTS outbox_events_unpublished ON outbox_events (seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS outbox_events_aggregates (
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_version   INTEGER NOT NULL,
    blocked_at     INTEGER NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) WITHOUT ROWID;

-- SQLite has one writer and no row locks to share work safely: one relay
-- at a time holds this lease.
CREATE TABLE IF NOT EXISTS outbox_events_lease (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
