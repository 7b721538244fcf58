-- Jobs unique over a window (consumer::jobs): see the PostgreSQL
-- migration. Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS consumer_job_uniques (
    queue      TEXT    NOT NULL,
    unique_key TEXT    NOT NULL,
    until      INTEGER NOT NULL,
    PRIMARY KEY (queue, unique_key)
);
CREATE INDEX IF NOT EXISTS consumer_job_uniques_until ON consumer_job_uniques (until);
