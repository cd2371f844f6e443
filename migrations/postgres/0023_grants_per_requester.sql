-- A grant for the rest of a session is the requester's alone: in a thread
-- that several people share, what one was allowed is not another's. The
-- grants given before are not known to be whose; they are asked again.
DROP TABLE session_grants;
CREATE TABLE session_grants (
    session_id   TEXT NOT NULL,
    requester    TEXT NOT NULL,
    pattern_key  TEXT NOT NULL,
    granted_by   TEXT NOT NULL,
    granted_at   BIGINT NOT NULL,
    PRIMARY KEY (session_id, requester, pattern_key)
);
