-- Replicas sharing the database, and the leases they hold: the leadership
-- of a single-connection ingress (`ingress:telegram`, …) and the ownership
-- of a session (`session:<key>`). Times are the database's clock in Unix
-- ms, so replicas' clocks need not agree. A lease is its holder's until
-- expires_at; the holder renews all of its leases in one statement, and
-- whoever takes a lease over increments token (the fencing token a write
-- made under the lease can be checked against).
CREATE TABLE replicas (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    started_at  BIGINT NOT NULL,
    seen_at     BIGINT NOT NULL
);

CREATE TABLE leases (
    name         TEXT PRIMARY KEY,
    holder       TEXT NOT NULL,
    token        BIGINT NOT NULL,
    acquired_at  BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);

CREATE INDEX leases_by_holder ON leases (holder);

-- A background process runs on one machine: only a replica there can
-- watch it after a restart.
ALTER TABLE process_watches ADD COLUMN host TEXT NOT NULL DEFAULT '';
