-- Recurring jobs (consumer::jobs): one row per schedule, the latest period
-- whose job was enqueued. An instance enqueues a period's job only if its
-- upsert moves `last_period` forward, in the job's own transaction: of all
-- the instances that tick for one period, exactly one writes its job, and
-- a period older than the last one is never written (missed periods run
-- once, for the latest). One row per schedule: nothing to prune.
CREATE TABLE IF NOT EXISTS consumer_job_schedules (
    queue       TEXT        NOT NULL,
    name        TEXT        NOT NULL,
    pattern     TEXT        NOT NULL,
    last_period TIMESTAMPTZ NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, name)
);
