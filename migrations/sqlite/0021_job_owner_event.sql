-- A job made in a chat keeps the message it was made from (its chat's
-- kind, its sender's roles then; its words left out): each slot checks
-- that sender against the platform's access rules as a message of theirs
-- would be. Jobs made before have none and are checked by allowlist and
-- pairing alone.
ALTER TABLE cron_jobs ADD COLUMN owner_event TEXT NOT NULL DEFAULT '';
