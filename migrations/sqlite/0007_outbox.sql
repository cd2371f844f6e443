-- What the sessions owe the chats: a turn's answer and notices, written in
-- the same transaction that stores the answer and marks its inbox event
-- processed, then sent. A row still pending after a crash is sent again by
-- the next start; the turn is never run again.
CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    inbox_id     INTEGER,
    session_key  TEXT NOT NULL,
    platform     TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    thread_id    TEXT,
    reply_to     TEXT,
    body         TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'pending';
CREATE INDEX outbox_by_inbox ON outbox (inbox_id);
