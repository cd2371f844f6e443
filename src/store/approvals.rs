//! Approval requests with their decisions, and the permanent allowlist of
//! dangerous-command pattern keys.

use std::fmt;
use std::str::FromStr;

use super::{Result, Store, now_ms, with_pool};

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Allowed this one time.
    ApprovedOnce,
    /// Allowed for the rest of the session.
    ApprovedSession,
    /// Allowed permanently (pattern keys added to the allowlist).
    ApprovedAlways,
    /// Denied by a person or a policy.
    Denied,
    /// No decision in time, or the daemon restarted while it waited.
    Expired,
}

impl ApprovalStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::ApprovedOnce => "approved_once",
            Self::ApprovedSession => "approved_session",
            Self::ApprovedAlways => "approved_always",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored approval status this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for ApprovalStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        [
            Self::Pending,
            Self::ApprovedOnce,
            Self::ApprovedSession,
            Self::ApprovedAlways,
            Self::Denied,
            Self::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

impl TryFrom<String> for ApprovalStatus {
    type Error = UnknownStatus;
    fn try_from(s: String) -> Result<Self, UnknownStatus> {
        s.parse()
    }
}

/// A list of pattern keys, stored as a JSON array.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct PatternKeys(pub Vec<String>);

impl TryFrom<String> for PatternKeys {
    type Error = serde_json::Error;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        serde_json::from_str(&s).map(PatternKeys)
    }
}

/// One approval request and, once made, its decision.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ApprovalRecord {
    /// Unguessable id (128 random bits, hex).
    pub id: String,
    /// Session that asked.
    pub session_id: String,
    /// Key of that session.
    pub session_key: String,
    /// Platform user whose turn asked.
    pub requester: String,
    /// The command as the model wrote it.
    pub command: String,
    /// Matched dangerous-pattern keys.
    #[sqlx(try_from = "String")]
    pub pattern_keys: PatternKeys,
    /// Current state.
    #[sqlx(try_from = "String")]
    pub status: ApprovalStatus,
    /// Who decided, if a person did.
    pub approver: Option<String>,
    /// Reason given with a denial.
    pub reason: Option<String>,
    /// Request time (Unix ms).
    pub created_at: i64,
    /// Deadline (Unix ms).
    pub expires_at: i64,
    /// Decision time (Unix ms).
    pub decided_at: Option<i64>,
}

/// An allowlisted pattern key.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct AllowEntry {
    /// Pattern key.
    pub pattern_key: String,
    /// Who allowed it.
    pub added_by: String,
    /// When (Unix ms).
    pub added_at: i64,
}

macro_rules! approval_columns {
    () => {
        "id, session_id, session_key, requester, command, pattern_keys, status, approver, reason, created_at, expires_at, decided_at"
    };
}

impl Store {
    /// Stores a new request.
    pub async fn insert_approval(&self, record: &ApprovalRecord) -> Result<()> {
        let keys = serde_json::to_string(&record.pattern_keys.0).unwrap_or_else(|_| "[]".into());
        with_pool!(self, pool => sqlx::query(
            "INSERT INTO approvals (id, session_id, session_key, requester, command, pattern_keys, status, \
             approver, reason, created_at, expires_at, decided_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
            .bind(&record.id).bind(&record.session_id).bind(&record.session_key)
            .bind(&record.requester).bind(super::storable(&record.command)).bind(keys)
            .bind(record.status.as_str()).bind(&record.approver).bind(&record.reason)
            .bind(record.created_at).bind(record.expires_at).bind(record.decided_at)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Records a decision on a pending request. Returns false when the
    /// request does not exist or was already decided: a decision is made
    /// once.
    pub async fn decide_approval(
        &self,
        id: &str,
        status: ApprovalStatus,
        approver: Option<&str>,
        reason: Option<&str>,
    ) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "UPDATE approvals SET status = $1, approver = $2, reason = $3, decided_at = $4 \
             WHERE id = $5 AND status = 'pending'")
            .bind(status.as_str()).bind(approver).bind(reason).bind(now_ms()).bind(id)
            .execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// A request by id.
    pub async fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>> {
        let sql = concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals WHERE id = $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(id).fetch_optional(pool).await?))
    }

    /// The most recent requests, newest first.
    pub async fn list_approvals(&self, limit: i64) -> Result<Vec<ApprovalRecord>> {
        let sql = concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals ORDER BY created_at DESC, id LIMIT $1"
        );
        Ok(with_pool!(self, pool => sqlx::query_as(sql).bind(limit).fetch_all(pool).await?))
    }

    /// Adds a pattern key to the permanent allowlist. Returns false if it
    /// was already there.
    pub async fn allow_pattern(&self, pattern_key: &str, added_by: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query(
            "INSERT INTO allowlist (pattern_key, added_by, added_at) VALUES ($1, $2, $3) \
             ON CONFLICT (pattern_key) DO NOTHING")
            .bind(pattern_key).bind(added_by).bind(now_ms()).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// Removes a pattern key from the allowlist. Returns false if absent.
    pub async fn revoke_pattern(&self, pattern_key: &str) -> Result<bool> {
        let n = with_pool!(self, pool => sqlx::query("DELETE FROM allowlist WHERE pattern_key = $1")
            .bind(pattern_key).execute(pool).await?.rows_affected());
        Ok(n == 1)
    }

    /// The whole allowlist, sorted by key.
    pub async fn allowlist(&self) -> Result<Vec<AllowEntry>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT pattern_key, added_by, added_at FROM allowlist ORDER BY pattern_key")
            .fetch_all(pool).await?))
    }

    /// Whether a pattern key is permanently allowed.
    pub async fn is_pattern_allowed(&self, pattern_key: &str) -> Result<bool> {
        let n: i64 = with_pool!(self, pool => sqlx::query_scalar(
            "SELECT COUNT(*) FROM allowlist WHERE pattern_key = $1")
            .bind(pattern_key).fetch_one(pool).await?);
        Ok(n > 0)
    }
}
