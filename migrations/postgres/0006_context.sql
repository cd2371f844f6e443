-- A session's history as the model sees it once it was shortened to fit
-- the context window (the messages table keeps every message whole): the
-- shortened history up to message through_id, as JSON; the messages after
-- through_id follow from the messages table. One row per session, replaced
-- at each compression, so a reload does not summarise the same history
-- again.
CREATE TABLE context_checkpoints (
    session_id   TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    through_id   BIGINT NOT NULL,
    history      TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

-- A session that outgrew the context window goes on in a new session that
-- carries a summary; parent_id links the new one to the one it continues.
ALTER TABLE sessions ADD COLUMN parent_id TEXT;

-- The model a chat chose for its session with /model (unset: the
-- configured one).
ALTER TABLE sessions ADD COLUMN model TEXT;
