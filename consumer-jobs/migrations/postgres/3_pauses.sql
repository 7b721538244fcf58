-- Paused job queues (consumer::jobs): while a queue has a row here its
-- jobs are not claimed (the claim reads it by primary key); jobs running
-- when it was paused finish, and their retries wait with the rest.
CREATE TABLE IF NOT EXISTS consumer_job_pauses (
    queue     TEXT        PRIMARY KEY,
    paused_by TEXT        NOT NULL,
    reason    TEXT        NOT NULL,
    paused_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
