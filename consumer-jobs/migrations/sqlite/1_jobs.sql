-- Jobs (consumer::jobs): see the PostgreSQL migration. Times are Unix
-- milliseconds, headers JSON text. AUTOINCREMENT: a `seq` is never given
-- again after its job is deleted, so `(seq, claims)` names one delivery
-- for ever.
CREATE TABLE IF NOT EXISTS consumer_jobs (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    queue        TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    job_key      TEXT    NULL,
    headers      TEXT    NOT NULL,
    payload      BLOB    NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 1,
    priority     INTEGER NOT NULL DEFAULT 0,
    unique_key   TEXT    NULL,
    run_at       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    claims       INTEGER NOT NULL DEFAULT 0,
    lease_holder TEXT    NULL,
    lease_until  INTEGER NULL,
    last_error   TEXT    NULL
);
CREATE INDEX IF NOT EXISTS consumer_jobs_due ON consumer_jobs (queue, priority DESC, run_at, seq);
CREATE INDEX IF NOT EXISTS consumer_jobs_keyed ON consumer_jobs (queue, job_key, seq)
    WHERE job_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS consumer_jobs_unique ON consumer_jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;
