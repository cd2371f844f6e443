//! The approval audit trail (every request and decision, each row chained
//! to the previous by a SHA-256 hash), session grants, and where approval
//! prompts were shown.

use sha2::{Digest, Sha256};

use super::{Backend, Result, Store, now_ms, with_pool};

/// The hash the first row chains to.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an audit row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditKind {
    /// A command was put to a human.
    Requested,
    /// Someone decided it.
    Decided,
    /// Nobody did in time, the turn was cancelled, or the gateway restarted.
    Expired,
    /// A press or a request was refused (not allowed, nobody to ask).
    Refused,
    /// A hard-blocked command was stopped by the policy.
    HardBlocked,
    /// The automatic reviewer (smart mode) decided, with no request put
    /// to a person.
    Reviewed,
}

impl AuditKind {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Decided => "decided",
            Self::Expired => "expired",
            Self::Refused => "refused",
            Self::HardBlocked => "hard_blocked",
            Self::Reviewed => "reviewed",
        }
    }
}

/// One audit event to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent<'a> {
    /// The approval.
    pub approval_id: &'a str,
    /// What happened.
    pub event: AuditKind,
    /// Session of the request.
    pub session_id: &'a str,
    /// Who asked.
    pub requester: &'a str,
    /// Who acted (approver, or the policy).
    pub actor: Option<&'a str>,
    /// The command.
    pub command: &'a str,
    /// Matched pattern keys, comma-separated.
    pub pattern_keys: &'a str,
    /// The result (`pending`, `approved_once`, `denied`…).
    pub outcome: &'a str,
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct AuditRow {
    /// Position in the chain.
    pub id: i64,
    /// The approval.
    pub approval_id: String,
    /// What happened.
    pub event: String,
    /// Session.
    pub session_id: String,
    /// Who asked.
    pub requester: String,
    /// Who acted.
    pub actor: Option<String>,
    /// The command.
    pub command: String,
    /// Pattern keys.
    pub pattern_keys: String,
    /// Result.
    pub outcome: String,
    /// When (Unix ms).
    pub at: i64,
    /// Hash of the previous row.
    pub prev_hash: String,
    /// Hash of this row.
    pub hash: String,
}

/// The result of checking the chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChainCheck {
    /// Rows checked.
    pub rows: usize,
    /// The first row whose hash or link does not match, if any.
    pub first_broken: Option<i64>,
}

/// A pending approval's prompt location.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PromptRef {
    /// Approval id.
    pub id: String,
    /// Platform of the prompt.
    pub prompt_platform: Option<String>,
    /// Chat of the prompt.
    pub prompt_chat: Option<String>,
    /// Message id of the prompt.
    pub prompt_message: Option<String>,
}

/// The hash of a row's content chained to `prev`.
fn row_hash(prev: &str, fields: &[&str], at: i64) -> String {
    let canonical = serde_json::to_string(&(prev, fields, at)).unwrap_or_default();
    Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl AuditRow {
    fn expected_hash(&self) -> String {
        row_hash(
            &self.prev_hash,
            &[
                &self.approval_id,
                &self.event,
                &self.session_id,
                &self.requester,
                self.actor.as_deref().unwrap_or(""),
                &self.command,
                &self.pattern_keys,
                &self.outcome,
            ],
            self.at,
        )
    }
}

/// The pending approvals' prompt locations, before any filter by session.
macro_rules! pending_prompts {
    () => {
        "SELECT id, prompt_platform, prompt_chat, prompt_message FROM approvals \
         WHERE status = 'pending'"
    };
}

/// What a decision grants beside its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant<'a> {
    /// Nothing more (once, denied, expired…).
    Nothing,
    /// The keys, for the rest of this session, to this requester.
    Session {
        /// The session.
        session: &'a str,
        /// Who asked (an actor's key).
        requester: &'a str,
    },
    /// The keys, on the permanent allowlist.
    Always,
}

/// A decision on a pending request, recorded whole in one transaction by
/// [`Store::settle_approval`]: its status, the grant it gives and its
/// audit entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement<'a> {
    /// The stored status.
    pub status: super::ApprovalStatus,
    /// Who decided, stored with the status (`None` for the timeout, a
    /// restart…; the entry's `actor` says which).
    pub approver: Option<&'a str>,
    /// Why (a denial's reason, a timeout).
    pub reason: Option<&'a str>,
    /// The grant.
    pub grant: Grant<'a>,
    /// The keys granted, one by one (the entry holds them joined).
    pub keys: &'a [String],
    /// The audit entry.
    pub entry: AuditEvent<'a>,
}

impl Store {
    /// Appends an event to the audit chain.
    pub async fn append_audit(&self, event: &AuditEvent<'_>) -> Result<()> {
        self.write_audited(None, event).await.map(drop)
    }

    /// Records a decision on a pending request with its grant and its
    /// audit entry, all or nothing: a grant never stands without its
    /// decision and its entry, and a request decided elsewhere first
    /// (another replica, the timeout) grants nothing. False when the
    /// request does not exist or was decided already.
    pub async fn settle_approval(&self, id: &str, settlement: &Settlement<'_>) -> Result<bool> {
        self.write_audited(Some((id, settlement)), &settlement.entry)
            .await
    }

    /// In one write transaction: the decision on request `id` with its
    /// grants, when `settle` names one (false, and nothing written, when it
    /// was decided already), then `entry` appended to the chain. Appends
    /// are serialised: a process lock, and on PostgreSQL the chain's
    /// advisory lock as the transaction's first statement, so replicas
    /// append one at a time and two settlements that insert the same keys
    /// in another order wait rather than deadlock. On SQLite the write lock
    /// is taken up front, so reading the chain head and appending cannot be
    /// split by another writer.
    async fn write_audited(
        &self,
        settle: Option<(&str, &Settlement<'_>)>,
        entry: &AuditEvent<'_>,
    ) -> Result<bool> {
        let _guard = self.audit_lock.lock().await;
        let at = now_ms();
        // Hashed as stored, so the chain verifies from the rows.
        let command = super::storable(entry.command);
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            if matches!(self.backend, Backend::Postgres(_)) {
                sqlx::query("SELECT pg_advisory_xact_lock(7266001)").execute(&mut *tx).await?;
            }
            if let Some((id, settlement)) = settle {
                let decided = sqlx::query(
                    "UPDATE approvals SET status = $1, approver = $2, reason = $3, decided_at = $4 \
                     WHERE id = $5 AND status = 'pending'")
                    .bind(settlement.status.as_str()).bind(settlement.approver)
                    .bind(settlement.reason).bind(at).bind(id)
                    .execute(&mut *tx).await?.rows_affected();
                if decided != 1 {
                    return Ok(false);
                }
                let by = settlement.entry.actor.unwrap_or("-");
                for key in settlement.keys {
                    let granted = match settlement.grant {
                        Grant::Nothing => break,
                        Grant::Session { session, requester } => sqlx::query(
                            "INSERT INTO session_grants (session_id, requester, pattern_key, granted_by, granted_at) \
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id, requester, pattern_key) DO NOTHING")
                            .bind(session).bind(requester),
                        Grant::Always => sqlx::query(
                            "INSERT INTO allowlist (pattern_key, added_by, added_at) VALUES ($1, $2, $3) \
                             ON CONFLICT (pattern_key) DO NOTHING"),
                    };
                    granted.bind(key).bind(by).bind(at).execute(&mut *tx).await?;
                }
            }
            let last: Option<String> =
                sqlx::query_scalar("SELECT hash FROM approval_audit ORDER BY id DESC LIMIT 1")
                    .fetch_optional(&mut *tx)
                    .await?;
            let prev = last.as_deref().unwrap_or(GENESIS);
            let hash = row_hash(
                prev,
                &[
                    entry.approval_id,
                    entry.event.as_str(),
                    entry.session_id,
                    entry.requester,
                    entry.actor.unwrap_or(""),
                    &command,
                    entry.pattern_keys,
                    entry.outcome,
                ],
                at,
            );
            sqlx::query(
                "INSERT INTO approval_audit (approval_id, event, session_id, requester, actor, command, \
                 pattern_keys, outcome, at, prev_hash, hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(entry.approval_id)
            .bind(entry.event.as_str())
            .bind(entry.session_id)
            .bind(entry.requester)
            .bind(entry.actor)
            .bind(&*command)
            .bind(entry.pattern_keys)
            .bind(entry.outcome)
            .bind(at)
            .bind(prev)
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(true)
    }

    /// The audit trail, oldest first.
    pub async fn audit_rows(&self) -> Result<Vec<AuditRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT id, approval_id, event, session_id, requester, actor, command, pattern_keys, outcome, at, prev_hash, hash \
             FROM approval_audit ORDER BY id")
            .fetch_all(pool).await?))
    }

    /// Recomputes the chain and reports the first row that does not fit.
    pub async fn verify_audit(&self) -> Result<ChainCheck> {
        let rows = self.audit_rows().await?;
        let mut prev = GENESIS.to_string();
        for row in &rows {
            if row.prev_hash != prev || row.hash != row.expected_hash() {
                return Ok(ChainCheck {
                    rows: rows.len(),
                    first_broken: Some(row.id),
                });
            }
            prev = row.hash.clone();
        }
        Ok(ChainCheck {
            rows: rows.len(),
            first_broken: None,
        })
    }

    /// Grants pattern keys for the rest of a session, to `requester`.
    pub async fn grant_session(
        &self,
        session_id: &str,
        requester: &str,
        keys: &[String],
        by: &str,
    ) -> Result<()> {
        for key in keys {
            with_pool!(self, pool => sqlx::query(
                "INSERT INTO session_grants (session_id, requester, pattern_key, granted_by, granted_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id, requester, pattern_key) DO NOTHING")
                .bind(session_id).bind(requester).bind(key).bind(by).bind(now_ms())
                .execute(pool).await?.rows_affected());
        }
        Ok(())
    }

    /// The pattern keys granted in a session to `requester` (to anyone in
    /// it with `None`), each once.
    pub async fn session_grants(
        &self,
        session_id: &str,
        requester: Option<&str>,
    ) -> Result<Vec<String>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT DISTINCT pattern_key FROM session_grants WHERE session_id = $1 \
             AND ($2 IS NULL OR requester = $2) ORDER BY pattern_key")
            .bind(session_id).bind(requester).fetch_all(pool).await?))
    }

    /// Records where an approval's prompt was shown.
    pub async fn set_approval_prompt(
        &self,
        id: &str,
        platform: &str,
        chat: &str,
        message: &str,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE approvals SET prompt_platform = $1, prompt_chat = $2, prompt_message = $3 WHERE id = $4")
            .bind(platform).bind(chat).bind(message).bind(id)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The approvals waiting with a prompt in `chat` on `platform`, oldest
    /// first, with their commands: in `thread` when one is given (that of
    /// the session that asked), at most `limit`.
    pub async fn pending_prompts_in(
        &self,
        platform: &str,
        chat: &str,
        thread: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(String, String)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT a.id, a.command FROM approvals a WHERE a.status = 'pending' \
             AND a.prompt_platform = $1 AND a.prompt_chat = $2 \
             AND ($3 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.id = a.session_id \
             AND s.thread_id = $3)) ORDER BY a.created_at LIMIT $4")
            .bind(platform).bind(chat).bind(thread).bind(limit).fetch_all(pool).await?))
    }

    /// Pending approvals with their prompt locations: all of them, or
    /// those of the sessions with keys `session_keys`.
    pub async fn pending_prompts(&self, session_keys: Option<&[&str]>) -> Result<Vec<PromptRef>> {
        let sql = concat!(
            pending_prompts!(),
            " AND session_id IN (SELECT id FROM sessions WHERE key = ANY($1)) ORDER BY created_at"
        );
        match (session_keys, &self.backend) {
            (None, _) => self.pending_prompts_of(None).await,
            (Some(keys), Backend::Postgres(pool)) => {
                Ok(sqlx::query_as(sql).bind(keys).fetch_all(pool).await?)
            }
            (Some(keys), Backend::Sqlite(_)) => {
                let mut found = Vec::new();
                for key in keys {
                    found.extend(self.pending_prompts_of(Some(key)).await?);
                }
                Ok(found)
            }
        }
    }

    /// Pending approvals with their prompt locations: all of them, or
    /// those of the session with key `session_key`.
    async fn pending_prompts_of(&self, session_key: Option<&str>) -> Result<Vec<PromptRef>> {
        Ok(with_pool!(self, pool => sqlx::query_as(concat!(
            pending_prompts!(),
            " AND ($1 IS NULL OR session_id IN (SELECT id FROM sessions WHERE key = $1)) ORDER BY created_at"))
            .bind(session_key).fetch_all(pool).await?))
    }
}
