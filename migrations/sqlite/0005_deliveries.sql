-- The bot's own comment on each pull request or issue: created once, then
-- updated, so a PR gets one answer that follows its latest event.
CREATE TABLE bot_comments (
    entity       TEXT PRIMARY KEY,
    comment_id   TEXT NOT NULL,
    updated_at   INTEGER NOT NULL
);

-- Webhook answers and where they went, with their retries.
CREATE TABLE deliveries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    route        TEXT NOT NULL,
    entity       TEXT NOT NULL,
    target       TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX deliveries_by_route ON deliveries (route, id);
