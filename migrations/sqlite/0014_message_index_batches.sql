-- The full-text index of messages catches up in batches rather than row by
-- row: the insert trigger flushed a segment of the index with every
-- transaction that stored a message, a sixth of the write-ahead log's pages
-- in a chat turn (PERFORMANCE.md, "CPU per turn"). Messages with ids up to
-- `through` are indexed; `Store::index_messages` indexes the others, before
-- every search and in the daemon's upkeep. Message ids only grow
-- (AUTOINCREMENT), so none is left behind.
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;

CREATE TABLE messages_fts_through (
    through INTEGER NOT NULL
);
INSERT INTO messages_fts_through (through) SELECT coalesce(max(id), 0) FROM messages;

-- A message not indexed yet has nothing in the index to take out, and is
-- indexed with its new content when its turn comes.
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT through FROM messages_fts_through) BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages
WHEN old.id <= (SELECT through FROM messages_fts_through) BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
