-- Paused job queues (consumer::jobs): see the PostgreSQL migration. Times
-- are Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_job_pauses (
    queue     TEXT    PRIMARY KEY,
    paused_by TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    paused_at INTEGER NOT NULL
);
