//! Scheduled jobs (`[[cron.jobs]]` and the `cronjob` tool): durable,
//! single-fire, and honest about what they delivered.
//!
//! A job's next slot is kept in storage. When it comes due, its run is
//! handed to the session manager as an inbox event whose dedupe key is the
//! (job, slot) pair — stored once however many replicas or restarts try —
//! and the run is recorded under the same pair; only then does the job's
//! slot move on. So a crash between the two fires the slot again and finds
//! it stored: exactly one run per slot. Slots that came due while the
//! daemon was down follow the job's missed-run policy.
//!
//! A run's status (queued, running, succeeded, failed) is read from its
//! inbox event and kept apart from its delivery (pending, posted, failed,
//! gave up), read from the outbox rows its turn wrote. A run that failed,
//! was refused, or whose answer was not delivered is reported to the job's
//! owner in the owner's chat — never silently.

mod desk;
pub mod schedule;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use desk::Desk;
pub use schedule::{Schedule, ScheduleError};

use crate::config::{Config, CronJobConfig, MissedPolicy};
use crate::platform::{ChatRef, PlatformError, retrying};
use crate::sessions::{SessionManager, Submitted};
use crate::store::{CronJob, CronRun, Store, StoreError};

/// Session keys of job runs start with this.
pub const SESSION_PREFIX: &str = "cron:";

/// Longest sleep between two looks at storage: jobs made on another
/// replica are seen at least this often.
const IDLE_LOOK: Duration = Duration::from_secs(30);
/// How often unsettled runs are looked at.
const SETTLE_EVERY: Duration = Duration::from_secs(2);

/// The sender of the runs of a job nobody owns (one from the
/// configuration): not a person, so no person's budget counts them.
pub const NO_OWNER: &str = "cron";

/// The job a run's session key belongs to.
pub fn job_of_session(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(SESSION_PREFIX)?;
    Some(rest.rsplit_once(':').map_or(rest, |(job, _)| job))
}

/// Why a job made by someone who lost access is not run (and paused).
pub const OWNER_GONE: &str =
    "the person who made it may no longer reach the agent; the job is paused";

/// The dedupe key of job `id`'s run at `slot`.
fn dedupe_key(id: &str, slot: i64) -> String {
    format!("{SESSION_PREFIX}{id}:{slot}")
}

/// What one [`Scheduler::tick`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tick {
    /// Runs handed to their sessions.
    pub fired: usize,
    /// Runs that were stored already (another replica, or before a crash).
    pub already: usize,
    /// Slots passed over by the missed-run policy.
    pub skipped: usize,
    /// Runs refused (over budget).
    pub refused: usize,
}

/// Fires due jobs, settles their runs and tells owners of failures.
#[derive(Clone)]
pub struct Scheduler {
    store: Store,
    sessions: SessionManager,
    config: Arc<Config>,
    wake: Arc<Notify>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler handing runs to `sessions` (whose chats' desks wake
    /// it when they make or resume a job).
    pub fn new(store: Store, sessions: SessionManager, config: Arc<Config>) -> Self {
        Self {
            wake: sessions.cron_wake(),
            store,
            sessions,
            config,
        }
    }

    /// Writes the configured jobs into storage (a changed schedule is
    /// slotted again from `now`) and removes the ones no longer
    /// configured.
    pub async fn sync_config(&self, now: i64) -> Result<(), StoreError> {
        let mut keep = Vec::new();
        for job in &self.config.cron.jobs {
            let Ok(schedule) = Schedule::parse(&job.schedule, &job.timezone) else {
                // `switchboard check` names it; the daemon does not start
                // with it, so this is only a job edited in storage.
                continue;
            };
            let row = configured(job, now, &schedule);
            let stored = self.store.job(&row.id).await?;
            let reschedule = stored.as_ref().is_none_or(|s| {
                s.schedule != row.schedule || s.timezone != row.timezone || s.origin != "config"
            });
            let row = CronJob {
                created_at: stored.as_ref().map_or(now, |s| s.created_at),
                ..row
            };
            self.store.put_job(&row, reschedule).await?;
            keep.push(row.id);
        }
        let gone = self.store.prune_config_jobs(&keep).await?;
        if gone > 0 {
            tracing::info!(
                cron.removed = gone,
                "configured jobs no longer in the file removed"
            );
        }
        Ok(())
    }

    /// Now, on the sessions' clock.
    fn now(&self) -> i64 {
        self.sessions.clock().now_ms()
    }

    /// Runs until `stop`: fires what is due, settles runs, tells owners.
    /// With `cron.enabled` off, jobs are left as stored and nothing fires;
    /// runs still settle and owners are still told.
    pub async fn run(self, stop: CancellationToken) {
        if self.config.cron.enabled
            && let Err(err) = self.sync_config(self.now()).await
        {
            tracing::error!(error = %err, "configured jobs not stored; they do not run");
        }
        loop {
            let now = self.now();
            let mut pause = IDLE_LOOK;
            match self.look(now).await {
                Ok((_, open)) if open => pause = SETTLE_EVERY,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "scheduled jobs not looked at; trying again");
                    pause = Duration::from_secs(5);
                }
            }
            if let Ok(Some(next)) = self.store.next_job_at().await {
                let until = u64::try_from(next.saturating_sub(self.now())).unwrap_or(0);
                pause = pause.min(Duration::from_millis(until.max(50)));
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Fires every job due at `now` (per its missed-run policy), settles
    /// the runs not settled yet and tells owners of failures.
    pub async fn tick(&self, now: i64) -> Result<Tick, StoreError> {
        Ok(self.look(now).await?.0)
    }

    /// [`tick`](Self::tick), and whether runs are left unsettled.
    async fn look(&self, now: i64) -> Result<(Tick, bool), StoreError> {
        let mut done = Tick::default();
        if self.config.cron.enabled {
            for job in self.store.jobs_due(now).await? {
                self.fire_due(&job, now, &mut done).await?;
            }
        }
        let open = self.settle().await?;
        self.tell_owners().await?;
        Ok((done, open))
    }

    async fn fire_due(&self, job: &CronJob, now: i64, done: &mut Tick) -> Result<(), StoreError> {
        let Some(due) = job.next_at else {
            return Ok(());
        };
        let schedule = match Schedule::parse(&job.schedule, &job.timezone) {
            Ok(s) => s,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "job's schedule unreadable; paused");
                self.store.pause_job(&job.id, true, None).await?;
                return Ok(());
            }
        };
        // Slots due by now: the stored one, and the ones after it. A slot
        // is on time while no later one is due.
        let (later, count) = schedule.slots_between(due, now, job.created_at, 10_000);
        let mut slots = vec![due];
        slots.extend(later);
        let latest = *slots.last().unwrap_or(&due);
        let late: Vec<i64> = slots[..slots.len() - 1].to_vec();
        let fire: Vec<i64> = match MissedPolicy::parse(&job.missed) {
            _ if late.is_empty() => vec![latest],
            MissedPolicy::Skip => vec![latest],
            MissedPolicy::Once => vec![latest],
            MissedPolicy::All => {
                let limit = usize::try_from(job.missed_limit.max(1)).unwrap_or(1);
                slots[slots.len().saturating_sub(limit + 1)..].to_vec()
            }
        };
        // Under `skip`, the on-time slot runs only when it is the one due
        // now (less than a minute late): a daemon that was down for its
        // slot does not run it late.
        let on_time = now - latest < 60_000;
        let fire: Vec<i64> = if MissedPolicy::parse(&job.missed) == MissedPolicy::Skip && !on_time {
            Vec::new()
        } else {
            fire
        };
        let passed = (count + 1).saturating_sub(fire.len());
        if passed > 0 {
            done.skipped += passed;
            let skipped_at = slots.iter().rev().find(|s| !fire.contains(s)).copied();
            if let Some(slot) = skipped_at {
                let detail = format!(
                    "{passed} slot(s) missed while the daemon was down (missed = {})",
                    job.missed
                );
                self.store
                    .record_run(&job.id, slot, None, "skipped", "none", Some(&detail))
                    .await?;
            }
            tracing::info!(job = %job.id, missed = passed, policy = %job.missed, "missed slots passed over");
        }
        if let Some(&slot) = fire.last()
            && !self.sessions.owner_may_run(job).await?
        {
            // Made in a chat by someone since unpaired or taken off the
            // allowlist: it would act as them. One refused run (its chat
            // told once), the job paused; an operator resumes or deletes
            // it.
            let added = self
                .store
                .record_run(&job.id, slot, None, "refused", "none", Some(OWNER_GONE))
                .await?;
            if added {
                done.refused += 1;
            } else {
                done.already += 1;
            }
            self.store.pause_job(&job.id, true, None).await?;
            tracing::warn!(job = %job.id, owner = %job.owner_user, "job's owner may no longer reach the agent; paused");
        } else {
            for slot in fire {
                match self.fire(job, slot).await? {
                    Fired::Handed => done.fired += 1,
                    Fired::Already => done.already += 1,
                    Fired::Refused => done.refused += 1,
                    // The gateway is full: the slot stays due and is tried on
                    // the next tick.
                    Fired::Busy => return Ok(()),
                }
            }
        }
        let next = schedule.next_after(now.max(latest), job.created_at);
        self.store.advance_job(&job.id, due, next).await?;
        Ok(())
    }

    /// Hands job `job`'s run at `slot` to its session, once.
    async fn fire(&self, job: &CronJob, slot: i64) -> Result<Fired, StoreError> {
        let key = dedupe_key(&job.id, slot);
        let refusal =
            crate::budgets::job_refusal(&self.store, &self.config, job, self.now()).await?;
        if let Some(refusal) = refusal {
            let added = self
                .store
                .record_run(&job.id, slot, None, "refused", "none", Some(&refusal))
                .await?;
            return Ok(if added {
                Fired::Refused
            } else {
                Fired::Already
            });
        }
        let submitted = self.sessions.run_job(job, slot, &key).await?;
        let stored = self.store.inbox_state(&key).await?;
        match (submitted, stored) {
            (Submitted::Busy, _) => Ok(Fired::Busy),
            (outcome, Some((inbox_id, _, _))) => {
                let added = self
                    .store
                    .record_run(&job.id, slot, Some(inbox_id), "queued", "pending", None)
                    .await?;
                // Whoever stored the event fired it; the run's record is
                // the same whoever writes it first.
                Ok(if outcome == Submitted::Accepted {
                    tracing::info!(job = %job.id, slot, inbox.id = inbox_id, recorded = added, "job run handed to its session");
                    Fired::Handed
                } else {
                    Fired::Already
                })
            }
            (outcome, None) => {
                let detail = format!("not run: {outcome:?}");
                self.store
                    .record_run(&job.id, slot, None, "failed", "none", Some(&detail))
                    .await?;
                Ok(Fired::Already)
            }
        }
    }

    /// Reads the state of runs not settled yet from their inbox events
    /// and outbox rows; whether some are still unsettled.
    async fn settle(&self) -> Result<bool, StoreError> {
        let mut open = false;
        for run in self.store.runs_open().await? {
            let Some(inbox_id) = run.inbox_id else {
                continue;
            };
            let Some((attempts, outcome)) = self.store.inbox_progress(inbox_id).await? else {
                self.store
                    .update_run(run.id, "failed", "none", Some("its event is gone"))
                    .await?;
                continue;
            };
            let (status, detail) = match outcome.as_deref() {
                None if attempts > 0 => ("running", None),
                None => ("queued", None),
                Some("final" | "budget_exhausted") => ("succeeded", None),
                Some("over_budget") => (
                    "failed",
                    Some("stopped before a model call that could cross a spend cap".to_string()),
                ),
                Some(other) => ("failed", Some(format!("the turn ended: {other}"))),
            };
            let delivery = if outcome.is_none() {
                "pending"
            } else {
                delivery_of(&self.store.outbox_for(inbox_id).await?)
            };
            open |= matches!(status, "queued" | "running") || delivery == "pending";
            if status != run.status || delivery != run.delivery {
                self.store
                    .update_run(run.id, status, delivery, detail.as_deref())
                    .await?;
                tracing::info!(job = %run.job_id, run = run.id, status, delivery, "job run");
            }
        }
        Ok(open)
    }

    /// Tells each failed, refused or undelivered run's owner, once.
    async fn tell_owners(&self) -> Result<(), StoreError> {
        for run in self.store.runs_to_notice().await? {
            if !self.store.notice_run(run.id).await? {
                continue;
            }
            let job = self.store.job(&run.job_id).await?;
            let Some(job) = job else {
                tracing::error!(job = %run.job_id, run = run.id, status = %run.status, delivery = %run.delivery, "job run failed; its job is gone, no one to tell");
                continue;
            };
            let text = failure_notice(&job, &run);
            tracing::error!(job = %job.id, run = run.id, status = %run.status, delivery = %run.delivery, detail = ?run.detail, "job run failed; telling its owner");
            let to = ChatRef {
                platform: job.platform.as_str().into(),
                chat: job.owner_chat.clone(),
                thread: job.owner_thread.clone(),
            };
            let sent = match self.sessions.platforms().port(&to.platform) {
                Some(port) => retrying(|| port.send(&to, None, &text)).await,
                None => Err(PlatformError::Unavailable(format!(
                    "{} is not connected",
                    to.platform
                ))),
            };
            match sent {
                Ok(_) => {}
                Err(PlatformError::Unavailable(why)) => {
                    tracing::warn!(job = %job.id, error = %why, "owner not told yet; trying again");
                    self.store.unnotice_run(run.id).await?;
                }
                Err(err) => {
                    tracing::error!(job = %job.id, error = %err, "owner could not be told of the failed run");
                }
            }
        }
        Ok(())
    }
}

enum Fired {
    Handed,
    Already,
    Refused,
    Busy,
}

/// A run's delivery, from the outbox rows its turn wrote.
fn delivery_of(rows: &[crate::store::OutboxRow]) -> &'static str {
    if rows.is_empty() {
        "none"
    } else if rows.iter().any(|r| r.status == "pending") {
        "pending"
    } else if let Some(failed) = rows.iter().find(|r| r.status == "failed") {
        if failed.attempts > 1 {
            "gave up"
        } else {
            "failed"
        }
    } else {
        "posted"
    }
}

/// What the owner of `job` is told about `run`.
fn failure_notice(job: &CronJob, run: &CronRun) -> String {
    let what = match (run.status.as_str(), run.delivery.as_str()) {
        ("refused", _) => "was not run".to_string(),
        ("failed", _) => "failed".to_string(),
        (_, delivery) => format!("ran, but its answer was not delivered ({delivery})"),
    };
    let why = run
        .detail
        .as_deref()
        .unwrap_or("see `switchboard cron runs`");
    format!("Scheduled job \"{}\" ({}) {what}: {why}.", job.name, job.id)
}

/// The stored form of configured job `job`.
fn configured(job: &CronJobConfig, now: i64, schedule: &Schedule) -> CronJob {
    let nonempty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    CronJob {
        id: format!("config:{}", job.name.trim()),
        name: job.name.trim().to_string(),
        origin: "config".into(),
        schedule: job.schedule.trim().to_string(),
        timezone: job.timezone.trim().to_string(),
        prompt: job.prompt.clone(),
        toolsets: (!job.toolsets.is_empty()).then(|| job.toolsets.join(",")),
        platform: job.platform.trim().to_string(),
        chat_id: job.chat.trim().to_string(),
        thread_id: nonempty(&job.thread),
        owner_user: String::new(),
        owner_chat: nonempty(&job.notify_chat).unwrap_or_else(|| job.chat.trim().to_string()),
        owner_thread: nonempty(&job.notify_chat).map_or_else(|| nonempty(&job.thread), |_| None),
        owner_event: String::new(),
        missed: job.missed.as_str().into(),
        missed_limit: i64::from(job.missed_limit.max(1)),
        paused: 0,
        next_at: schedule.next_after(now, now),
        created_at: now,
        updated_at: now,
    }
}
