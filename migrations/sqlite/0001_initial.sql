-- switchboard schema v1 (SQLite). Timestamps are Unix milliseconds.

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,
    key             TEXT NOT NULL,
    platform        TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    thread_id       TEXT,
    user_id         TEXT,
    created_at      INTEGER NOT NULL,
    last_active_at  INTEGER NOT NULL,
    ended_at        INTEGER,
    end_reason      TEXT
);
-- At most one open session per key; ended ones stay for search and history.
CREATE UNIQUE INDEX sessions_open_key ON sessions (key) WHERE ended_at IS NULL;
CREATE INDEX sessions_user ON sessions (platform, user_id);
CREATE INDEX sessions_recent ON sessions (last_active_at);

CREATE TABLE messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role          TEXT NOT NULL,
    content       TEXT NOT NULL DEFAULT '',
    tool_calls    TEXT,
    tool_call_id  TEXT,
    name          TEXT,
    created_at    INTEGER NOT NULL
);
CREATE INDEX messages_session ON messages (session_id, id);

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;

-- Durable inbox: an inbound event is committed here before the platform is
-- acknowledged; dedupe_key (platform + platform event id) drops redeliveries.
CREATE TABLE inbox (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    platform       TEXT NOT NULL,
    dedupe_key     TEXT NOT NULL UNIQUE,
    session_key    TEXT NOT NULL,
    payload        TEXT NOT NULL,
    received_at    INTEGER NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    processed_at   INTEGER,
    outcome        TEXT
);
CREATE INDEX inbox_pending ON inbox (session_key, id) WHERE processed_at IS NULL;

CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    session_key   TEXT NOT NULL,
    requester     TEXT NOT NULL,
    command       TEXT NOT NULL,
    pattern_keys  TEXT NOT NULL,
    status        TEXT NOT NULL,
    approver      TEXT,
    reason        TEXT,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    decided_at    INTEGER
);
CREATE INDEX approvals_pending ON approvals (status, expires_at);

CREATE TABLE allowlist (
    pattern_key  TEXT PRIMARY KEY,
    added_by     TEXT NOT NULL,
    added_at     INTEGER NOT NULL
);

CREATE TABLE pairing_requests (
    platform    TEXT NOT NULL,
    code        TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    user_name   TEXT NOT NULL DEFAULT '',
    chat_id     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (platform, code)
);
CREATE INDEX pairing_requests_user ON pairing_requests (platform, user_id);

CREATE TABLE paired_users (
    platform     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    user_name    TEXT NOT NULL DEFAULT '',
    approved_by  TEXT NOT NULL,
    approved_at  INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
);

CREATE TABLE memory_notes (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_key    TEXT NOT NULL,
    content     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX memory_notes_user ON memory_notes (user_key, id);
