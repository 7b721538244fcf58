-- Jobs unique over a window (consumer::jobs): one row per queue and unique
-- key, until when the key is taken. An enqueue takes the key with one
-- upsert that succeeds only where the key is free or its window has
-- ended, in the job's transaction; ended windows are deleted by the
-- store's purge.
CREATE TABLE IF NOT EXISTS consumer_job_uniques (
    queue      TEXT        NOT NULL,
    unique_key TEXT        NOT NULL,
    until      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (queue, unique_key)
);
CREATE INDEX IF NOT EXISTS consumer_job_uniques_until ON consumer_job_uniques (until);
