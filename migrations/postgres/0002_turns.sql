-- One row per agent turn: what it cost and how it ended.
CREATE TABLE turns (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id         TEXT NOT NULL,
    started_at         BIGINT NOT NULL,
    finished_at        BIGINT NOT NULL,
    model_calls        BIGINT NOT NULL,
    tool_calls         BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    outcome            TEXT NOT NULL
);
CREATE INDEX turns_session ON turns (session_id, id);
