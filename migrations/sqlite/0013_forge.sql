-- Pull-request review and CI triage on a forge (GitHub, GitLab).

-- What each webhook event lets the forge tools reach (its repository,
-- change, SHAs, job), stored with the event and read by its run.
CREATE TABLE forge_events (
    event_id   TEXT PRIMARY KEY,
    route      TEXT NOT NULL,
    entity     TEXT NOT NULL,
    scope      TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Per pull / merge request: the head last reviewed (incremental reviews
-- start there) and whether automatic reviews are paused.
CREATE TABLE forge_changes (
    route        TEXT NOT NULL,
    entity       TEXT NOT NULL,
    reviewed_sha TEXT,
    paused       INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (route, entity)
);

-- Findings posted on lines, by fingerprint: the same finding on the same
-- code is not posted again; their comment ids find the bot's threads.
CREATE TABLE forge_findings (
    route       TEXT NOT NULL,
    entity      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    path        TEXT NOT NULL,
    line        INTEGER NOT NULL,
    comment_id  TEXT,
    head_sha    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (route, entity, fingerprint)
);

-- Every output written to a forge (review, summary, check), by its
-- idempotency key (event and output): posted, updated, failed or gave up,
-- with the forge's id for it.
CREATE TABLE forge_outputs (
    key        TEXT PRIMARY KEY,
    route      TEXT NOT NULL,
    entity     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    status     TEXT NOT NULL,
    remote_id  TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at INTEGER NOT NULL
);
CREATE INDEX forge_outputs_entity ON forge_outputs (route, entity);
