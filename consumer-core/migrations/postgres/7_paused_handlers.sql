-- Handlers an operator paused (`consumer pause`, the service's admin
-- endpoint): every consumer of a handler reads this table about once a
-- second, and its deliveries wait, spending no attempt, until the row is
-- deleted (`consumer resume`). handler '*' pauses every handler.
CREATE TABLE IF NOT EXISTS consumer_paused_handlers (
    handler   TEXT        PRIMARY KEY,
    paused_by TEXT        NOT NULL,
    reason    TEXT        NOT NULL,
    since     TIMESTAMPTZ NOT NULL DEFAULT now()
);
