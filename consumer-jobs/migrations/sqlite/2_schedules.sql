-- Recurring jobs (consumer::jobs): see the PostgreSQL migration. Times are
-- Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_job_schedules (
    queue       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    pattern     TEXT    NOT NULL,
    last_period INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    PRIMARY KEY (queue, name)
);
