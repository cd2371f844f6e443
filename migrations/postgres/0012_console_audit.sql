-- What operators did in the console (logins, decisions, retries): who,
-- what, on what, and how it went.
CREATE TABLE console_audit (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       BIGINT NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,
    target   TEXT NOT NULL,
    outcome  TEXT NOT NULL
);
CREATE INDEX console_audit_at ON console_audit (at);
