-- The inbox's dedupe keys leave the inbox for a table of their own, filled
-- after the events (`store/inbox/keys.rs`): an index on random keys took a
-- page of the write-ahead log for every delivery, where a batch of events
-- appended to the inbox shares its pages. The events above `inbox_keyed`'s
-- mark are not keyed yet; the one process writing this database holds
-- their keys in memory and keys them when the intake is quiet.
--
-- The unprocessed events are indexed in arrival order, no longer by
-- session, for the same reason: on SQLite one process runs every session
-- and hands each event to it as it is stored; a session's own events are
-- read back only to catch its worker up, and the index's session keys
-- serve that search without reading the rows.
CREATE TABLE inbox_rebuilt (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    platform       TEXT NOT NULL,
    dedupe_key     TEXT NOT NULL,
    session_key    TEXT NOT NULL,
    payload        TEXT NOT NULL,
    received_at    INTEGER NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    processed_at   INTEGER,
    outcome        TEXT
);
INSERT INTO inbox_rebuilt (id, platform, dedupe_key, session_key, payload, received_at,
                           attempts, processed_at, outcome)
    SELECT id, platform, dedupe_key, session_key, payload, received_at,
           attempts, processed_at, outcome
    FROM inbox ORDER BY id;
-- Ids are never given again, even those of events forgotten since.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'inbox_rebuilt', seq FROM sqlite_sequence WHERE name = 'inbox'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'inbox_rebuilt');
UPDATE sqlite_sequence SET seq = max(seq, (SELECT seq FROM sqlite_sequence WHERE name = 'inbox'))
    WHERE name = 'inbox_rebuilt' AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'inbox');
DROP TABLE inbox;
ALTER TABLE inbox_rebuilt RENAME TO inbox;

CREATE INDEX inbox_pending ON inbox (id, session_key) WHERE processed_at IS NULL;
CREATE INDEX inbox_webhook_age ON inbox (received_at) WHERE platform = 'webhook';

CREATE TABLE inbox_keys (
    dedupe_key  TEXT PRIMARY KEY,
    id          INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO inbox_keys (dedupe_key, id) SELECT dedupe_key, id FROM inbox ORDER BY id;

-- Events up to `upto` have their keys in `inbox_keys`.
CREATE TABLE inbox_keyed (upto INTEGER NOT NULL);
INSERT INTO inbox_keyed (upto) SELECT COALESCE(MAX(id), 0) FROM inbox;

-- An event forgotten (its replay window over) or given up (a command's
-- claim) takes its key with it.
CREATE TRIGGER inbox_keys_gone AFTER DELETE ON inbox BEGIN
    DELETE FROM inbox_keys WHERE dedupe_key = old.dedupe_key AND id = old.id;
END;
