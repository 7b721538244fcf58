-- Paused handlers (see the PostgreSQL migration); since is Unix
-- milliseconds.
CREATE TABLE IF NOT EXISTS consumer_paused_handlers (
    handler   TEXT    PRIMARY KEY,
    paused_by TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    since     INTEGER NOT NULL
) WITHOUT ROWID;
