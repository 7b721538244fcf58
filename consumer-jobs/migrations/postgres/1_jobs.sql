-- Jobs (consumer::jobs): one row per job waiting, running or waiting to
-- retry; an acked job's row is deleted, so the table holds only the work
-- still to do. `seq` is the order of enqueueing: writers of one key take a
-- transaction-scoped advisory lock before they insert, so a key's `seq`
-- order is its commit order. A worker claims a job by setting its lease
-- (`lease_holder`, `lease_until`) and counting the claim (`claims`, which
-- names the delivery: a settle after the lease passed to another worker
-- touches nothing); a job whose lease has ended is claimed again.
-- fillfactor leaves room on each page so a lease renewal (no indexed
-- column changes) stays a HOT update and does not bloat the indexes.
CREATE TABLE IF NOT EXISTS consumer_jobs (
    seq          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        TEXT        NOT NULL,
    id           TEXT        NOT NULL,
    job_key      TEXT        NULL,
    headers      JSONB       NOT NULL,
    payload      BYTEA       NOT NULL,
    attempt      INTEGER     NOT NULL DEFAULT 1,
    priority     INTEGER     NOT NULL DEFAULT 0,
    unique_key   TEXT        NULL,
    run_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    claims       INTEGER     NOT NULL DEFAULT 0,
    lease_holder TEXT        NULL,
    lease_until  TIMESTAMPTZ NULL,
    last_error   TEXT        NULL
) WITH (fillfactor = 80);
-- What the claim reads: a queue's jobs by priority, then due time.
CREATE INDEX IF NOT EXISTS consumer_jobs_due ON consumer_jobs (queue, priority DESC, run_at, seq);
-- What the per-key order reads: whether an earlier job of the key is left.
CREATE INDEX IF NOT EXISTS consumer_jobs_keyed ON consumer_jobs (queue, job_key, seq)
    WHERE job_key IS NOT NULL;
-- Unique jobs: one job per unique key while it is pending (an acked
-- job's row is gone, so the key is free again).
CREATE UNIQUE INDEX IF NOT EXISTS consumer_jobs_unique ON consumer_jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;
