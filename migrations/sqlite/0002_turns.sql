-- One row per agent turn: what it cost and how it ended.
CREATE TABLE turns (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id         TEXT NOT NULL,
    started_at         INTEGER NOT NULL,
    finished_at        INTEGER NOT NULL,
    model_calls        INTEGER NOT NULL,
    tool_calls         INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    outcome            TEXT NOT NULL
);
CREATE INDEX turns_session ON turns (session_id, id);
