//! What reviews on a forge remember: each event's scope, each change's
//! last reviewed head and pause, the findings posted on lines, and every
//! output written (with its idempotency key, status and the forge's id).

use super::{Result, Store, now_ms, storable, with_pool};

/// An output written to a forge.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ForgeOutput {
    /// Its idempotency key: the event and the output.
    pub key: String,
    /// Webhook route.
    pub route: String,
    /// The change or run it is about.
    pub entity: String,
    /// `review`, `summary`, `check`, `resolve`.
    pub kind: String,
    /// `pending`, `posted`, `updated`, `failed` or `gave up`.
    pub status: String,
    /// The forge's id for it.
    pub remote_id: Option<String>,
    /// Attempts made.
    pub attempts: i64,
    /// Error of the last failed attempt.
    pub last_error: Option<String>,
    /// Last change (Unix ms).
    pub updated_at: i64,
}

/// Where an output stands after one attempt.
#[derive(Debug, Clone, Copy)]
pub struct OutputAttempt<'a> {
    /// `pending`, `posted`, `updated`, `failed` or `gave up`.
    pub status: &'a str,
    /// The forge's id for it, when known.
    pub remote_id: Option<&'a str>,
    /// What went wrong.
    pub error: Option<&'a str>,
}

impl Store {
    /// Keeps the scope of event `event_id` (written again when the sender
    /// retries the event).
    pub async fn forge_event_put(
        &self,
        event_id: &str,
        route: &str,
        entity: &str,
        scope: &str,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_events (event_id, route, entity, scope, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (event_id) DO UPDATE SET scope = excluded.scope")
            .bind(storable(event_id)).bind(route).bind(storable(entity)).bind(storable(scope)).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The scope of event `event_id`: (route, entity, scope).
    pub async fn forge_event(&self, event_id: &str) -> Result<Option<(String, String, String)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT route, entity, scope FROM forge_events WHERE event_id = $1")
            .bind(storable(event_id)).fetch_optional(pool).await?))
    }

    /// A change's last reviewed head and whether its reviews are paused.
    pub async fn forge_change(&self, route: &str, entity: &str) -> Result<(Option<String>, bool)> {
        let row: Option<(Option<String>, i64)> = with_pool!(self, pool => sqlx::query_as(
            "SELECT reviewed_sha, paused FROM forge_changes WHERE route = $1 AND entity = $2")
            .bind(route).bind(storable(entity)).fetch_optional(pool).await?);
        Ok(row.map_or((None, false), |(sha, paused)| (sha, paused != 0)))
    }

    /// Records that `sha` was reviewed.
    pub async fn forge_reviewed(&self, route: &str, entity: &str, sha: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_changes (route, entity, reviewed_sha, paused, updated_at) VALUES ($1, $2, $3, 0, $4) \
             ON CONFLICT (route, entity) DO UPDATE SET reviewed_sha = excluded.reviewed_sha, updated_at = excluded.updated_at")
            .bind(route).bind(storable(entity)).bind(storable(sha)).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Pauses or resumes a change's automatic reviews.
    pub async fn forge_pause(&self, route: &str, entity: &str, paused: bool) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_changes (route, entity, reviewed_sha, paused, updated_at) VALUES ($1, $2, NULL, $3, $4) \
             ON CONFLICT (route, entity) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at")
            .bind(route).bind(storable(entity)).bind(i64::from(paused)).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Fingerprints of the findings posted on a change.
    pub async fn forge_fingerprints(&self, route: &str, entity: &str) -> Result<Vec<String>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT fingerprint FROM forge_findings WHERE route = $1 AND entity = $2")
            .bind(route).bind(storable(entity)).fetch_all(pool).await?))
    }

    /// Ids of the line comments the gateway posted on a change.
    pub async fn forge_comment_ids(&self, route: &str, entity: &str) -> Result<Vec<String>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT comment_id FROM forge_findings WHERE route = $1 AND entity = $2 AND comment_id IS NOT NULL")
            .bind(route).bind(storable(entity)).fetch_all(pool).await?))
    }

    /// Records a finding posted on a line (once per fingerprint).
    #[allow(clippy::too_many_arguments)]
    pub async fn forge_finding(
        &self,
        route: &str,
        entity: &str,
        fingerprint: &str,
        path: &str,
        line: u64,
        comment_id: Option<&str>,
        head: &str,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_findings (route, entity, fingerprint, path, line, comment_id, head_sha, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (route, entity, fingerprint) DO NOTHING")
            .bind(route).bind(storable(entity)).bind(fingerprint).bind(storable(path))
            .bind(i64::try_from(line).unwrap_or(i64::MAX)).bind(comment_id).bind(storable(head)).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Output `key`, when it was attempted.
    pub async fn forge_output(&self, key: &str) -> Result<Option<ForgeOutput>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT key, route, entity, kind, status, remote_id, attempts, last_error, updated_at \
             FROM forge_outputs WHERE key = $1")
            .bind(storable(key)).fetch_optional(pool).await?))
    }

    /// Records that output `key` is about to be written (its first
    /// attempt): a record without a remote id then means a write whose
    /// answer was lost, to be looked for on the forge before writing again.
    pub async fn forge_output_intent(
        &self,
        key: &str,
        (route, entity, kind): (&str, &str, &str),
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_outputs (key, route, entity, kind, status, remote_id, attempts, last_error, updated_at) \
             VALUES ($1, $2, $3, $4, 'pending', NULL, 0, NULL, $5) ON CONFLICT (key) DO NOTHING")
            .bind(storable(key)).bind(route).bind(storable(entity)).bind(kind).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Records an attempt at output `key` (a known remote id is kept when
    /// the attempt names none).
    pub async fn forge_output_attempt(
        &self,
        key: &str,
        (route, entity, kind): (&str, &str, &str),
        attempt: OutputAttempt<'_>,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO forge_outputs (key, route, entity, kind, status, remote_id, attempts, last_error, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8) \
             ON CONFLICT (key) DO UPDATE SET status = excluded.status, \
             remote_id = COALESCE(excluded.remote_id, forge_outputs.remote_id), \
             attempts = forge_outputs.attempts + 1, last_error = excluded.last_error, updated_at = excluded.updated_at")
            .bind(storable(key)).bind(route).bind(storable(entity)).bind(kind).bind(attempt.status)
            .bind(attempt.remote_id.map(storable)).bind(attempt.error.map(storable)).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The outputs written about a change or run, newest first.
    pub async fn forge_outputs(&self, route: &str, entity: &str) -> Result<Vec<ForgeOutput>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT key, route, entity, kind, status, remote_id, attempts, last_error, updated_at \
             FROM forge_outputs WHERE route = $1 AND entity = $2 ORDER BY updated_at DESC")
            .bind(route).bind(storable(entity)).fetch_all(pool).await?))
    }
}
