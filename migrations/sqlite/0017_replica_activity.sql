-- What a replica reports with each renewal (see the PostgreSQL migration
-- of the same name; SQLite runs one replica and never renews).
-- `takes_sessions`: the replica takes sessions handed to it (false while
-- it drains, and for replicas of releases without hand-offs).
ALTER TABLE replicas ADD COLUMN takes_sessions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN moves_out INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN moves_in INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN last_move TEXT NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN moved_at INTEGER NOT NULL DEFAULT 0;
