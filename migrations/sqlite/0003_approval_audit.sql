-- Where an approval prompt was shown, so it can be closed after a restart.
ALTER TABLE approvals ADD COLUMN prompt_platform TEXT;
ALTER TABLE approvals ADD COLUMN prompt_chat TEXT;
ALTER TABLE approvals ADD COLUMN prompt_message TEXT;

-- Grants of pattern keys for the rest of one session.
CREATE TABLE session_grants (
    session_id   TEXT NOT NULL,
    pattern_key  TEXT NOT NULL,
    granted_by   TEXT NOT NULL,
    granted_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, pattern_key)
);

-- Append-only audit trail of approval requests and decisions; each row
-- carries the hash of the previous one.
CREATE TABLE approval_audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    approval_id  TEXT NOT NULL,
    event        TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    requester    TEXT NOT NULL,
    actor        TEXT,
    command      TEXT NOT NULL,
    pattern_keys TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    at           INTEGER NOT NULL,
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL
);
