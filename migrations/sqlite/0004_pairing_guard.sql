-- Failed pairing approvals per platform, for the lockout after 5 tries.
CREATE TABLE pairing_guard (
    platform      TEXT PRIMARY KEY,
    failures      INTEGER NOT NULL DEFAULT 0,
    locked_until  INTEGER NOT NULL DEFAULT 0
);

-- When each user last asked for a pairing code (survives approval).
CREATE TABLE pairing_last_request (
    platform    TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
);
