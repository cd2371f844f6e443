-- What a replica reports with each renewal, for `switchboard cluster
-- status`: turns it is running, sessions it handed to others and took
-- from them, and its last move (`<session> -> <replica>`, or `<- `) with
-- when (database clock, Unix ms; 0: none yet).
-- `takes_sessions`: the replica takes sessions handed to it (false while
-- it drains, and for replicas of releases without hand-offs).
ALTER TABLE replicas ADD COLUMN takes_sessions BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE replicas ADD COLUMN turns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN moves_out BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN moves_in BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replicas ADD COLUMN last_move TEXT NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN moved_at BIGINT NOT NULL DEFAULT 0;
