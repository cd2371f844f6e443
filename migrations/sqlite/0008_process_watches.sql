-- Background processes whose end a session asked to be told, kept until
-- it is told: a restart watches the ones still running (pid and its start
-- time in clock ticks since boot, so a reused pid is not taken for it) and
-- reports the ones that ended meanwhile.
CREATE TABLE process_watches (
    id           TEXT PRIMARY KEY,
    session_key  TEXT NOT NULL,
    command      TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    pid_start    INTEGER NOT NULL,
    started_at   INTEGER NOT NULL
);

-- A session's latest event: where a report into it is addressed.
CREATE INDEX inbox_by_session ON inbox (session_key, id);
