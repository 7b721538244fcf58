-- Transactional outbox (the standard's outbox_events, plus what the relay needs).
CREATE TABLE IF NOT EXISTS outbox_events (
    id             UUID         PRIMARY KEY,
    seq            BIGSERIAL    NOT NULL,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    version        BIGINT       NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    destination    TEXT         NOT NULL,
    payload        JSONB        NOT NULL,
    headers        JSONB        NULL,
    trace_metadata JSONB        NULL,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT now(),
    published_at   TIMESTAMPTZ  NULL,
    attempts       INTEGER      NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NULL,
    last_error     TEXT         NULL,
    failed_at      TIMESTAMPTZ  NULL,
    UNIQUE (aggregate_type, aggregate_id, version)
);
CREATE INDEX IF NOT EXISTS outbox_events_unpublished ON outbox_events (seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;

-- One row per aggregate: the version counter whose row lock orders the
-- aggregate's writers, and the block set when an event fails for good.
CREATE TABLE IF NOT EXISTS outbox_events_aggregates (
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    last_version   BIGINT       NOT NULL,
    blocked_at     TIMESTAMPTZ  NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
