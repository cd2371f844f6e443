//! What turns cost, summed per user, chat, webhook route and job, and the
//! budget warnings already given.

use super::{Result, Store, now_ms, with_pool};
use crate::budgets::Scope;

/// One row of a usage summary.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct UsageRow {
    /// `user`, `chat`, `route` or `job`.
    pub level: String,
    /// Platform (empty for jobs).
    pub platform: String,
    /// User, chat, route or job id.
    pub id: String,
    /// Turns.
    pub turns: i64,
    /// Tokens, prompt and completion.
    pub tokens: i64,
    /// Cost in millionths.
    pub cost_micros: i64,
    /// Tokens held by running turns now.
    pub held_tokens: i64,
    /// Cost held by running turns now, in millionths.
    pub held_micros: i64,
}

/// A running turn's hold on the budgets: what its model calls used so far
/// and the estimate of the call it is about to make, counted against the
/// same user, chat, route and job as its record will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The turn's session (one turn runs in a session at a time).
    pub session_id: String,
    /// Platform.
    pub platform: String,
    /// Chat (for webhooks, the route).
    pub chat_id: String,
    /// User.
    pub user_id: Option<String>,
    /// Scheduled job.
    pub job_id: Option<String>,
    /// Prompt tokens of the calls made so far.
    pub used_prompt: i64,
    /// Completion tokens of the calls made so far.
    pub used_completion: i64,
    /// What those calls cost, in millionths.
    pub used_micros: i64,
    /// Tokens the next call may use (its estimate).
    pub reserved_tokens: i64,
    /// What it may cost, in millionths.
    pub reserved_micros: i64,
}

impl Hold {
    fn tokens(&self) -> i64 {
        self.used_prompt + self.used_completion + self.reserved_tokens
    }

    fn micros(&self) -> i64 {
        self.used_micros + self.reserved_micros
    }
}

/// One cap a reservation is checked against: a scope's window since
/// `since`, with its caps (0: none).
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Whose.
    pub scope: Scope,
    /// Start of the window (Unix ms).
    pub since: i64,
    /// Token cap.
    pub token_cap: i64,
    /// Cost cap in millionths.
    pub cost_cap: i64,
}

/// A scope's spend: finished turns since a window's start, and what
/// running turns hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Cost of finished turns, in millionths.
    pub cost_micros: i64,
    /// Tokens of finished turns.
    pub tokens: i64,
    /// Cost held by running turns, in millionths.
    pub held_micros: i64,
    /// Tokens held by running turns.
    pub held_tokens: i64,
}

/// The filter on `turns` or `budget_holds` (same columns) for `scope`,
/// its `$1` and `$2`.
fn scope_filter(scope: &Scope) -> (&'static str, &str, &str) {
    match scope {
        Scope::User { platform, user } => (
            "platform = $1 AND user_id = $2",
            platform.as_str(),
            user.as_str(),
        ),
        Scope::Chat { platform, chat } => (
            "platform = $1 AND chat_id = $2",
            platform.as_str(),
            chat.as_str(),
        ),
        Scope::Route(route) => ("platform = $1 AND chat_id = $2", "webhook", route.as_str()),
        Scope::Job(job) => ("$1 = '' AND job_id = $2", "", job.as_str()),
    }
}

/// Sums what finished turns spent since `$3`, and what live holds other
/// than session `$5` hold at `$4`, for one scope.
fn spent_sql(filter: &str) -> String {
    format!(
        "SELECT \
         (SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM turns WHERE {filter} AND finished_at >= $3), \
         (SELECT CAST(COALESCE(SUM(prompt_tokens + completion_tokens), 0) AS BIGINT) FROM turns WHERE {filter} AND finished_at >= $3), \
         (SELECT CAST(COALESCE(SUM(used_micros + reserved_micros), 0) AS BIGINT) FROM budget_holds WHERE {filter} AND expires_at > $4 AND session_id <> $5), \
         (SELECT CAST(COALESCE(SUM(used_prompt + used_completion + reserved_tokens), 0) AS BIGINT) FROM budget_holds WHERE {filter} AND expires_at > $4 AND session_id <> $5)"
    )
}

/// Runs [`spent_sql`] for `scope` on `$executor`.
macro_rules! spent_of {
    ($executor:expr, $scope:expr, $since:expr, $now:expr, $except:expr) => {{
        let (filter, a, b) = scope_filter($scope);
        let (cost_micros, tokens, held_micros, held_tokens): (i64, i64, i64, i64) =
            sqlx::query_as(sqlx::AssertSqlSafe(spent_sql(filter)))
                .bind(a)
                .bind(b)
                .bind($since)
                .bind($now)
                .bind($except)
                .fetch_one($executor)
                .await?;
        Spent {
            cost_micros,
            tokens,
            held_micros,
            held_tokens,
        }
    }};
}

impl Store {
    /// What `scope`'s turns spent since `since`, and what its running
    /// turns hold at `now`.
    pub async fn spend(&self, scope: &Scope, since: i64, now: i64) -> Result<Spent> {
        Ok(with_pool!(self, pool => spent_of!(pool, scope, since, now, "")))
    }

    /// Holds `hold` for its session if every limit stays within its caps
    /// with it (what finished turns spent, plus what the other running
    /// turns hold, plus `hold`), checked and written under one lock so
    /// concurrent turns, on any replica, cannot both take the same
    /// remainder. The hold lives until `expires_at` unless renewed. Gives
    /// each limit's spend without this session's hold, and whether it was
    /// taken; when it was not, the session's earlier hold stays as it was.
    pub async fn reserve_hold(
        &self,
        hold: &Hold,
        limits: &[Limit],
        now: i64,
        expires_at: i64,
    ) -> Result<(bool, Vec<Spent>)> {
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            if matches!(self.backend, super::Backend::Postgres(_)) {
                sqlx::query("SELECT pg_advisory_xact_lock(7266002)").execute(&mut *tx).await?;
            }
            let mut spent = Vec::with_capacity(limits.len());
            for limit in limits {
                spent.push(spent_of!(&mut *tx, &limit.scope, limit.since, now, hold.session_id.as_str()));
            }
            let fits = limits.iter().zip(&spent).all(|(limit, s)| {
                (limit.token_cap <= 0 || s.tokens + s.held_tokens + hold.tokens() <= limit.token_cap)
                    && (limit.cost_cap <= 0
                        || s.cost_micros + s.held_micros + hold.micros() <= limit.cost_cap)
            });
            if fits {
                sqlx::query("DELETE FROM budget_holds WHERE expires_at <= $1")
                    .bind(now).execute(&mut *tx).await?;
                sqlx::query(
                    "INSERT INTO budget_holds (session_id, platform, chat_id, user_id, job_id, \
                     used_prompt, used_completion, used_micros, reserved_tokens, reserved_micros, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                     ON CONFLICT (session_id) DO UPDATE SET platform = excluded.platform, \
                     chat_id = excluded.chat_id, user_id = excluded.user_id, job_id = excluded.job_id, \
                     used_prompt = excluded.used_prompt, used_completion = excluded.used_completion, \
                     used_micros = excluded.used_micros, reserved_tokens = excluded.reserved_tokens, \
                     reserved_micros = excluded.reserved_micros, expires_at = excluded.expires_at")
                    .bind(&hold.session_id).bind(&hold.platform).bind(&hold.chat_id)
                    .bind(hold.user_id.as_deref()).bind(hold.job_id.as_deref())
                    .bind(hold.used_prompt).bind(hold.used_completion).bind(hold.used_micros)
                    .bind(hold.reserved_tokens).bind(hold.reserved_micros).bind(expires_at)
                    .execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok((fits, spent))
        })
    }

    /// Settles session `session_id`'s hold to what its calls used so far,
    /// with nothing reserved, until `expires_at`.
    pub async fn settle_hold(
        &self,
        session_id: &str,
        used: (i64, i64, i64),
        expires_at: i64,
    ) -> Result<()> {
        let (prompt, completion, micros) = used;
        with_pool!(self, pool => sqlx::query(
            "UPDATE budget_holds SET used_prompt = $1, used_completion = $2, used_micros = $3, \
             reserved_tokens = 0, reserved_micros = 0, expires_at = $4 WHERE session_id = $5")
            .bind(prompt).bind(completion).bind(micros).bind(expires_at).bind(session_id)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Moves session `from`'s hold to session `to` (its conversation went
    /// on there).
    pub async fn move_hold(&self, from: &str, to: &str) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE budget_holds SET session_id = $1 WHERE session_id = $2")
            .bind(to).bind(from).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Keeps session `session_id`'s hold counting until `expires_at`.
    pub async fn renew_hold(&self, session_id: &str, expires_at: i64) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE budget_holds SET expires_at = $1 WHERE session_id = $2")
            .bind(expires_at).bind(session_id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// What the calls of session `session_id`'s unfinished turn used, as
    /// its hold says (prompt and completion tokens, cost in millionths): a
    /// turn picked up after its process died counts them as its own.
    pub async fn held_usage(&self, session_id: &str) -> Result<Option<(i64, i64, i64)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT used_prompt, used_completion, used_micros FROM budget_holds WHERE session_id = $1")
            .bind(session_id).fetch_optional(pool).await?))
    }

    /// Spend since `since` per user, chat (routes are the webhook's
    /// chats) and job, with what their running turns hold now, the
    /// largest first.
    pub async fn usage_since(&self, since: i64) -> Result<Vec<UsageRow>> {
        // The same three levels over finished turns and over live holds.
        let levels = |table: &str,
                      live: &str,
                      turns: &str,
                      tokens: &str,
                      micros: &str,
                      held: &str,
                      held_micros: &str| {
            format!(
                "SELECT 'user' AS level, COALESCE(platform, '') AS platform, user_id AS id, \
                   {turns} AS turns, {tokens} AS tokens, {micros} AS cost_micros, {held} AS held_tokens, {held_micros} AS held_micros \
                   FROM {table} WHERE {live} AND user_id IS NOT NULL AND platform <> 'webhook' GROUP BY platform, user_id \
                 UNION ALL SELECT CASE WHEN platform = 'webhook' THEN 'route' ELSE 'chat' END, COALESCE(platform, ''), chat_id, \
                   {turns}, {tokens}, {micros}, {held}, {held_micros} \
                   FROM {table} WHERE {live} AND chat_id IS NOT NULL GROUP BY platform, chat_id \
                 UNION ALL SELECT 'job', '', job_id, {turns}, {tokens}, {micros}, {held}, {held_micros} \
                   FROM {table} WHERE {live} AND job_id IS NOT NULL GROUP BY job_id"
            )
        };
        let finished = levels(
            "turns",
            "finished_at >= $1",
            "COUNT(*)",
            "SUM(prompt_tokens + completion_tokens)",
            "SUM(cost_micros)",
            "0",
            "0",
        );
        let held = levels(
            "budget_holds",
            "expires_at > $2",
            "0",
            "0",
            "0",
            "SUM(used_prompt + used_completion + reserved_tokens)",
            "SUM(used_micros + reserved_micros)",
        );
        let sql = format!(
            "SELECT level, platform, id, CAST(SUM(turns) AS BIGINT) AS turns, \
               CAST(SUM(tokens) AS BIGINT) AS tokens, CAST(SUM(cost_micros) AS BIGINT) AS cost_micros, \
               CAST(SUM(held_tokens) AS BIGINT) AS held_tokens, CAST(SUM(held_micros) AS BIGINT) AS held_micros \
             FROM ({finished} UNION ALL {held}) AS spend GROUP BY level, platform, id \
             ORDER BY level, cost_micros DESC, tokens DESC, id"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(since).bind(now_ms()).fetch_all(pool).await?),
        )
    }

    /// Records that `scope` was given warning `level` in the window that
    /// starts at `window_at`; false when it was already.
    pub async fn budget_noticed(&self, scope: &str, window_at: i64, level: &str) -> Result<bool> {
        let added = with_pool!(self, pool => sqlx::query(
            "INSERT INTO budget_notices (scope, window_at, level, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, window_at, level) DO NOTHING")
            .bind(scope).bind(window_at).bind(level).bind(now_ms())
            .execute(pool).await?.rows_affected());
        Ok(added == 1)
    }
}
