//! Pairing: unknown DM senders get a code; the owner approves it from the
//! CLI and the sender becomes a paired (allowed) user.

use super::{Result, Store, now_ms, returning, with_pool};

/// A pending pairing request.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct PairingRequest {
    /// Platform name.
    pub platform: String,
    /// The code shown to the sender.
    pub code: String,
    /// The sender.
    pub user_id: String,
    /// The sender's display name.
    pub user_name: String,
    /// The DM chat, to tell the sender when approved.
    pub chat_id: String,
    /// Request time (Unix ms).
    pub created_at: i64,
    /// Expiry (Unix ms).
    pub expires_at: i64,
}

/// A user admitted by pairing.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct PairedUser {
    /// Platform name.
    pub platform: String,
    /// The user.
    pub user_id: String,
    /// Display name at approval time.
    pub user_name: String,
    /// Who approved.
    pub approved_by: String,
    /// When (Unix ms).
    pub approved_at: i64,
}

macro_rules! request_columns {
    () => {
        "platform, code, user_id, user_name, chat_id, created_at, expires_at"
    };
}

impl Store {
    /// Stores a pairing request.
    pub async fn insert_pairing_request(&self, request: &PairingRequest) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO pairing_last_request (platform, user_id, requested_at) VALUES ($1, $2, $3) \
             ON CONFLICT (platform, user_id) DO UPDATE SET requested_at = excluded.requested_at")
            .bind(&request.platform).bind(&request.user_id).bind(request.created_at)
            .execute(pool).await?.rows_affected());
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO pairing_requests (platform, code, user_id, user_name, chat_id, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)")
            .bind(&request.platform).bind(&request.code).bind(&request.user_id)
            .bind(&request.user_name).bind(&request.chat_id)
            .bind(request.created_at).bind(request.expires_at)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Unexpired pairing requests, oldest first; all platforms when
    /// `platform` is `None`.
    pub async fn pairing_requests(&self, platform: Option<&str>) -> Result<Vec<PairingRequest>> {
        let sql = concat!(
            "SELECT ",
            request_columns!(),
            " FROM pairing_requests \
             WHERE expires_at > $1 AND ($2 = '' OR platform = $2) ORDER BY created_at, code"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql)
            .bind(now_ms()).bind(platform.unwrap_or("")).fetch_all(pool).await?))
    }

    /// Approves an unexpired request by code: the user becomes paired and
    /// all their pending requests are removed. `None` if no such request.
    pub async fn approve_pairing(
        &self,
        platform: &str,
        code: &str,
        approved_by: &str,
    ) -> Result<Option<PairedUser>> {
        let now = now_ms();
        let sql = concat!(
            "SELECT ",
            request_columns!(),
            " FROM pairing_requests WHERE platform = $1 AND code = $2 AND expires_at > $3"
        );
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            let request: Option<PairingRequest> = sqlx::query_as(sql)
                .bind(platform).bind(code).bind(now).fetch_optional(&mut *tx).await?;
            let Some(request) = request else {
                return Ok(None);
            };
            sqlx::query("DELETE FROM pairing_requests WHERE platform = $1 AND user_id = $2")
                .bind(platform).bind(&request.user_id).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO paired_users (platform, user_id, user_name, approved_by, approved_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (platform, user_id) DO UPDATE \
                 SET user_name = excluded.user_name, approved_by = excluded.approved_by, approved_at = excluded.approved_at")
                .bind(platform).bind(&request.user_id).bind(&request.user_name)
                .bind(approved_by).bind(now).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Some(PairedUser {
                platform: platform.to_string(),
                user_id: request.user_id,
                user_name: request.user_name,
                approved_by: approved_by.to_string(),
                approved_at: now,
            }))
        })
    }

    /// Removes a paired user. False if they were not paired.
    pub async fn revoke_pairing(&self, platform: &str, user_id: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "DELETE FROM paired_users WHERE platform = $1 AND user_id = $2")
            .bind(platform).bind(user_id).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Paired users, sorted by platform and id.
    pub async fn paired_users(&self) -> Result<Vec<PairedUser>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT platform, user_id, user_name, approved_by, approved_at FROM paired_users ORDER BY platform, user_id")
            .fetch_all(pool).await?))
    }

    /// Whether a user is paired.
    pub async fn is_paired(&self, platform: &str, user_id: &str) -> Result<bool> {
        let n: i64 = with_pool!(self, pool => sqlx::query_scalar(
            "SELECT COUNT(*) FROM paired_users WHERE platform = $1 AND user_id = $2")
            .bind(platform).bind(user_id).fetch_one(pool).await?);
        Ok(n > 0)
    }

    /// Pending (unexpired) requests of one user on a platform.
    pub async fn pairing_requests_of(
        &self,
        platform: &str,
        user_id: &str,
    ) -> Result<Vec<PairingRequest>> {
        let sql = concat!(
            "SELECT ",
            request_columns!(),
            " FROM pairing_requests WHERE platform = $1 AND user_id = $2 AND expires_at > $3 ORDER BY created_at"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql)
            .bind(platform).bind(user_id).bind(now_ms()).fetch_all(pool).await?))
    }

    /// When the user last got a pairing code, approved or not (for rate
    /// limiting).
    pub async fn last_pairing_request_at(
        &self,
        platform: &str,
        user_id: &str,
    ) -> Result<Option<i64>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT requested_at FROM pairing_last_request WHERE platform = $1 AND user_id = $2")
            .bind(platform).bind(user_id).fetch_optional(pool).await?))
    }

    /// When approvals on `platform` are locked out until (Unix ms; 0 = not).
    pub async fn pairing_locked_until(&self, platform: &str) -> Result<i64> {
        let until: Option<i64> = with_pool!(self, pool => sqlx::query_scalar(
            "SELECT locked_until FROM pairing_guard WHERE platform = $1")
            .bind(platform).fetch_optional(pool).await?);
        Ok(until.unwrap_or(0))
    }

    /// Counts a failed approval; after `limit` failures in a row the
    /// platform is locked until `lock_until`. Returns the failure count.
    pub async fn record_pairing_failure(
        &self,
        platform: &str,
        limit: i64,
        lock_until: i64,
    ) -> Result<i64> {
        let failures: i64 = returning!(&self.backend, ex => sqlx::query_scalar(
            "INSERT INTO pairing_guard (platform, failures, locked_until) VALUES ($1, 1, 0) \
             ON CONFLICT (platform) DO UPDATE SET failures = pairing_guard.failures + 1 RETURNING failures")
            .bind(platform).fetch_one(ex).await?);
        if failures >= limit {
            with_pool!(self, pool => sqlx::query(
                "UPDATE pairing_guard SET failures = 0, locked_until = $1 WHERE platform = $2")
                .bind(lock_until).bind(platform).execute(pool).await?.rows_affected());
        }
        Ok(failures)
    }

    /// Clears the failure count after a successful approval.
    pub async fn reset_pairing_failures(&self, platform: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query("DELETE FROM pairing_guard WHERE platform = $1")
            .bind(platform).execute(pool).await?.rows_affected());
        Ok(())
    }
}
