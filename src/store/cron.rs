//! Scheduled jobs and their runs. A run is claimed by its (job, slot)
//! pair, which storage keeps unique; its status and its delivery status
//! are kept apart, so "ran" never reads as "posted".

use super::{Backend, Result, Store, now_ms, storable, with_pool};

/// A scheduled job as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct CronJob {
    /// `config:<name>` for configured jobs, a short id for chat-made ones.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `config` or `chat`.
    pub origin: String,
    /// As written (cron expression, `every …`, `at …`).
    pub schedule: String,
    /// IANA time zone (empty: UTC).
    pub timezone: String,
    /// What the agent is asked.
    pub prompt: String,
    /// Toolsets of its runs, comma-separated (none: the platform's preset).
    pub toolsets: Option<String>,
    /// Where its answers go.
    pub platform: String,
    /// Chat there.
    pub chat_id: String,
    /// Thread in that chat.
    pub thread_id: Option<String>,
    /// Whom it belongs to: a user id on `platform` (empty for configured
    /// jobs).
    pub owner_user: String,
    /// Where its owner is told of failures.
    pub owner_chat: String,
    /// Thread of that chat.
    pub owner_thread: Option<String>,
    /// The message a chat-made job was made from, as JSON, its words left
    /// out: who made it, in which kind of chat, with which roles then
    /// (empty for configured jobs, and for jobs made before it was kept).
    #[serde(skip_serializing)]
    pub owner_event: String,
    /// `skip`, `once` or `all`.
    pub missed: String,
    /// Most late runs with `all`.
    pub missed_limit: i64,
    /// 1 when paused.
    pub paused: i64,
    /// Its next slot (Unix ms); none when it has no more.
    pub next_at: Option<i64>,
    /// Made (Unix ms); intervals count from here.
    pub created_at: i64,
    /// Last changed (Unix ms).
    pub updated_at: i64,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct CronRun {
    /// Its id.
    pub id: i64,
    /// The job.
    pub job_id: String,
    /// The slot it ran for (Unix ms).
    pub slot_at: i64,
    /// The inbox event it ran as.
    pub inbox_id: Option<i64>,
    /// queued, running, succeeded, failed, skipped or refused.
    pub status: String,
    /// pending, posted, failed, gave up or none.
    pub delivery: String,
    /// Why, when it did not go well.
    pub detail: Option<String>,
    /// 1 once the owner was told of a failure.
    pub noticed: i64,
    /// Stored (Unix ms).
    pub created_at: i64,
    /// Last changed (Unix ms).
    pub updated_at: i64,
}

const JOB_COLUMNS: &str = "id, name, origin, schedule, timezone, prompt, toolsets, platform, \
    chat_id, thread_id, owner_user, owner_chat, owner_thread, missed, missed_limit, paused, \
    next_at, created_at, updated_at, owner_event";
const RUN_COLUMNS: &str =
    "id, job_id, slot_at, inbox_id, status, delivery, detail, noticed, created_at, updated_at";

/// How many chat-made jobs owner `$2` on platform `$1` keeps.
const OWNED: &str =
    "SELECT COUNT(*) FROM cron_jobs WHERE origin = 'chat' AND platform = $1 AND owner_user = $2";

impl Store {
    /// Stores `job` (a new one, or the configured job of that id with its
    /// settings replaced; its slot is kept unless `reschedule`).
    pub async fn put_job(&self, job: &CronJob, reschedule: bool) -> Result<()> {
        self.store_job(job, reschedule, None).await.map(drop)
    }

    /// Stores `job`, made in a chat, unless its owner keeps `most`
    /// chat-made jobs on its platform already. Whether it was stored.
    pub async fn add_chat_job(&self, job: &CronJob, most: i64) -> Result<bool> {
        self.store_job(job, true, Some(most)).await
    }

    /// [`put_job`](Self::put_job), and with `most` [`add_chat_job`](Self::add_chat_job):
    /// counted and stored in one transaction that no other count of that
    /// owner's jobs can pass (SQLite's write lock, taken as it begins; on
    /// PostgreSQL a lock on the owner to its end), so two confirmations
    /// pressed at once cannot both pass the limit.
    async fn store_job(&self, job: &CronJob, reschedule: bool, most: Option<i64>) -> Result<bool> {
        with_pool!(self, pool => {
            let mut tx = super::begin_write!(self, pool);
            if let Some(most) = most {
                if matches!(self.backend, Backend::Postgres(_)) {
                    // Each statement sees what committed before it (a
                    // server set to a stricter default would count from
                    // before the lock was granted).
                    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                        .bind(format!("cron owner {} {}", job.platform, job.owner_user))
                        .execute(&mut *tx)
                        .await?;
                }
                let owned: i64 = sqlx::query_scalar(OWNED)
                    .bind(&job.platform)
                    .bind(&job.owner_user)
                    .fetch_one(&mut *tx)
                    .await?;
                if owned >= most {
                    tx.rollback().await?;
                    return Ok(false);
                }
            }
            sqlx::query(
                "INSERT INTO cron_jobs (id, name, origin, schedule, timezone, prompt, toolsets, platform, \
                 chat_id, thread_id, owner_user, owner_chat, owner_thread, missed, missed_limit, paused, \
                 next_at, created_at, updated_at, owner_event) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $21) \
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, schedule = excluded.schedule, \
                 timezone = excluded.timezone, prompt = excluded.prompt, toolsets = excluded.toolsets, \
                 platform = excluded.platform, chat_id = excluded.chat_id, thread_id = excluded.thread_id, \
                 owner_chat = excluded.owner_chat, owner_thread = excluded.owner_thread, \
                 missed = excluded.missed, missed_limit = excluded.missed_limit, \
                 next_at = CASE WHEN $20 = 1 THEN excluded.next_at ELSE cron_jobs.next_at END, \
                 updated_at = excluded.updated_at",
            )
            .bind(&job.id)
            .bind(storable(&job.name))
            .bind(&job.origin)
            .bind(storable(&job.schedule))
            .bind(&job.timezone)
            .bind(storable(&job.prompt))
            .bind(job.toolsets.as_deref())
            .bind(&job.platform)
            .bind(&job.chat_id)
            .bind(job.thread_id.as_deref())
            .bind(&job.owner_user)
            .bind(&job.owner_chat)
            .bind(job.owner_thread.as_deref())
            .bind(&job.missed)
            .bind(job.missed_limit)
            .bind(job.paused)
            .bind(job.next_at)
            .bind(job.created_at)
            .bind(job.updated_at)
            .bind(i64::from(reschedule))
            .bind(storable(&job.owner_event))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Every job, by name.
    pub async fn jobs(&self) -> Result<Vec<CronJob>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM cron_jobs ORDER BY name, id");
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?),
        )
    }

    /// The jobs posting to `chat_id` on `platform`.
    pub async fn jobs_of_chat(&self, platform: &str, chat_id: &str) -> Result<Vec<CronJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE platform = $1 AND chat_id = $2 ORDER BY created_at, id"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(platform).bind(chat_id).fetch_all(pool).await?),
        )
    }

    /// How many chat-made jobs `owner_user` on `platform` keeps.
    pub async fn jobs_owned(&self, platform: &str, owner_user: &str) -> Result<i64> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(OWNED)
            .bind(platform).bind(owner_user).fetch_one(pool).await?))
    }

    /// The job `id`, or the one named `id`.
    pub async fn job(&self, id: &str) -> Result<Option<CronJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id).fetch_optional(pool).await?),
        )
    }

    /// Unpaused jobs whose slot is at or before `now`.
    pub async fn jobs_due(&self, now: i64) -> Result<Vec<CronJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE paused = 0 AND next_at IS NOT NULL \
             AND next_at <= $1 ORDER BY next_at, id"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(now).fetch_all(pool).await?),
        )
    }

    /// The earliest slot of an unpaused job.
    pub async fn next_job_at(&self) -> Result<Option<i64>> {
        Ok(with_pool!(self, pool => sqlx::query_scalar(
            "SELECT MIN(next_at) FROM cron_jobs WHERE paused = 0")
            .fetch_one(pool).await?))
    }

    /// Moves job `id` from slot `from` to `to`; false when another
    /// replica (or an edit) moved it first.
    pub async fn advance_job(&self, id: &str, from: i64, to: Option<i64>) -> Result<bool> {
        let moved = with_pool!(self, pool => sqlx::query(
            "UPDATE cron_jobs SET next_at = $1, updated_at = $2 WHERE id = $3 AND next_at = $4")
            .bind(to).bind(now_ms()).bind(id).bind(from)
            .execute(pool).await?.rows_affected());
        Ok(moved == 1)
    }

    /// Pauses or resumes job `id` (a resumed job's slot is `next_at`).
    pub async fn pause_job(&self, id: &str, paused: bool, next_at: Option<i64>) -> Result<bool> {
        let changed = with_pool!(self, pool => sqlx::query(
            "UPDATE cron_jobs SET paused = $1, next_at = COALESCE($2, next_at), updated_at = $3 WHERE id = $4")
            .bind(i64::from(paused)).bind(next_at).bind(now_ms()).bind(id)
            .execute(pool).await?.rows_affected());
        Ok(changed == 1)
    }

    /// Deletes job `id` (its runs stay, for the record).
    pub async fn delete_job(&self, id: &str) -> Result<bool> {
        let gone = with_pool!(self, pool => sqlx::query("DELETE FROM cron_jobs WHERE id = $1")
            .bind(id).execute(pool).await?.rows_affected());
        Ok(gone == 1)
    }

    /// Deletes the configured jobs whose ids are not in `keep`.
    pub async fn prune_config_jobs(&self, keep: &[String]) -> Result<u64> {
        let mut gone = 0;
        for job in self.jobs().await? {
            if job.origin == "config" && !keep.contains(&job.id) {
                gone += u64::from(self.delete_job(&job.id).await?);
            }
        }
        Ok(gone)
    }

    /// Records the run of `job_id` at `slot_at` unless it is recorded
    /// already; true when this call recorded it.
    pub async fn record_run(
        &self,
        job_id: &str,
        slot_at: i64,
        inbox_id: Option<i64>,
        status: &str,
        delivery: &str,
        detail: Option<&str>,
    ) -> Result<bool> {
        let now = now_ms();
        let added = with_pool!(self, pool => sqlx::query(
            "INSERT INTO cron_runs (job_id, slot_at, inbox_id, status, delivery, detail, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (job_id, slot_at) DO NOTHING")
            .bind(job_id).bind(slot_at).bind(inbox_id).bind(status).bind(delivery)
            .bind(detail.map(storable).as_deref()).bind(now)
            .execute(pool).await?.rows_affected());
        Ok(added == 1)
    }

    /// The latest `limit` runs (of job `job_id` when given), newest first.
    pub async fn runs(&self, job_id: Option<&str>, limit: i64) -> Result<Vec<CronRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE ($1 IS NULL OR job_id = $1) \
             ORDER BY slot_at DESC, id DESC LIMIT $2"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(job_id).bind(limit).fetch_all(pool).await?),
        )
    }

    /// Runs not settled yet (running, or their delivery pending), oldest
    /// first.
    pub async fn runs_open(&self) -> Result<Vec<CronRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE status IN ('queued', 'running') \
             OR delivery = 'pending' ORDER BY id LIMIT 500"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?),
        )
    }

    /// Runs that ended badly and whose owner was not told yet.
    pub async fn runs_to_notice(&self) -> Result<Vec<CronRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE noticed = 0 AND \
             (status IN ('failed', 'refused') OR delivery IN ('failed', 'gave up')) ORDER BY id LIMIT 100"
        );
        Ok(
            with_pool!(self, pool => sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?),
        )
    }

    /// Sets run `id`'s status, delivery and detail.
    pub async fn update_run(
        &self,
        id: i64,
        status: &str,
        delivery: &str,
        detail: Option<&str>,
    ) -> Result<()> {
        with_pool!(self, pool => sqlx::query(
            "UPDATE cron_runs SET status = $1, delivery = $2, detail = COALESCE($3, detail), updated_at = $4 \
             WHERE id = $5")
            .bind(status).bind(delivery).bind(detail.map(storable).as_deref()).bind(now_ms()).bind(id)
            .execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Marks run `id` as told to its owner; false when it was already.
    pub async fn notice_run(&self, id: i64) -> Result<bool> {
        let marked = with_pool!(self, pool => sqlx::query(
            "UPDATE cron_runs SET noticed = 1, updated_at = $1 WHERE id = $2 AND noticed = 0")
            .bind(now_ms()).bind(id).execute(pool).await?.rows_affected());
        Ok(marked == 1)
    }

    /// Takes back [`Store::notice_run`] (the owner could not be told yet).
    pub async fn unnotice_run(&self, id: i64) -> Result<()> {
        with_pool!(self, pool => sqlx::query("UPDATE cron_runs SET noticed = 0 WHERE id = $1")
            .bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// The inbox event stored under `dedupe_key`: its id, attempts, and
    /// outcome once processed.
    pub async fn inbox_state(
        &self,
        dedupe_key: &str,
    ) -> Result<Option<(i64, i64, Option<String>)>> {
        let Some(id) = self.inbox_id_of(dedupe_key).await? else {
            return Ok(None);
        };
        Ok(self
            .inbox_progress(id)
            .await?
            .map(|(attempts, outcome)| (id, attempts, outcome)))
    }

    /// Inbox event `id`'s attempts and outcome once processed.
    pub async fn inbox_progress(&self, id: i64) -> Result<Option<(i64, Option<String>)>> {
        Ok(with_pool!(self, pool => sqlx::query_as(
            "SELECT attempts, outcome FROM inbox WHERE id = $1")
            .bind(id).fetch_optional(pool).await?))
    }
}
