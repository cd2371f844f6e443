-- Scheduled jobs and what they ran, and what turns cost.
--
-- A job comes from the configuration (`[[cron.jobs]]`, origin 'config') or
-- from a chat's `cronjob` tool (origin 'chat'). `next_at` is the slot it
-- fires at next; it moves on only after that slot's run was stored, so a
-- crash in between fires it again and the run's unique slot keeps it once.
CREATE TABLE cron_jobs (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    origin         TEXT NOT NULL,
    schedule       TEXT NOT NULL,
    timezone       TEXT NOT NULL,
    prompt         TEXT NOT NULL,
    toolsets       TEXT,
    platform       TEXT NOT NULL,
    chat_id        TEXT NOT NULL,
    thread_id      TEXT,
    owner_user     TEXT NOT NULL,
    owner_chat     TEXT NOT NULL,
    owner_thread   TEXT,
    missed         TEXT NOT NULL,
    missed_limit   BIGINT NOT NULL,
    paused         BIGINT NOT NULL DEFAULT 0,
    next_at        BIGINT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX cron_jobs_due ON cron_jobs (next_at) WHERE paused = 0;
CREATE INDEX cron_jobs_chat ON cron_jobs (platform, chat_id);

-- One row per slot a job was due at: the claim (job, slot) is unique,
-- across replicas too. `status`: queued, running, succeeded, failed,
-- skipped, refused; `delivery`: pending, posted, failed, gave up, none. A
-- run is settled once both are final; `noticed` says its owner was told
-- of a failure.
CREATE TABLE cron_runs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       TEXT NOT NULL,
    slot_at      BIGINT NOT NULL,
    inbox_id     BIGINT,
    status       TEXT NOT NULL,
    delivery     TEXT NOT NULL,
    detail       TEXT,
    noticed      BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    UNIQUE (job_id, slot_at)
);
CREATE INDEX cron_runs_open ON cron_runs (id) WHERE status IN ('queued', 'running') OR delivery = 'pending';

-- What a turn cost, and whom it is counted against.
ALTER TABLE turns ADD COLUMN model TEXT;
ALTER TABLE turns ADD COLUMN cost_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN platform TEXT;
ALTER TABLE turns ADD COLUMN chat_id TEXT;
ALTER TABLE turns ADD COLUMN user_id TEXT;
ALTER TABLE turns ADD COLUMN job_id TEXT;
CREATE INDEX turns_user ON turns (platform, user_id, finished_at);
CREATE INDEX turns_chat ON turns (platform, chat_id, finished_at);
CREATE INDEX turns_job ON turns (job_id, finished_at);

-- Budget warnings already given: one per scope, window and level.
CREATE TABLE budget_notices (
    scope       TEXT NOT NULL,
    window_at   BIGINT NOT NULL,
    level       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (scope, window_at, level)
);
