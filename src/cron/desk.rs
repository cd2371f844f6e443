//! The `cronjob` tool of one chat: jobs are made only for the chat the
//! conversation is in (no argument names another), only after the person
//! confirms them, and at most `cron.max_jobs_per_user` per person; a job
//! made in a group chat runs with `cron.group_toolsets`. Listing, pausing,
//! resuming and deleting reach only this chat's jobs, each only once the
//! job's owner allows it.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Schedule;
use crate::agent::ClarifyBroker;
use crate::agent::layer::JobDesk;
use crate::budgets::utc;
use crate::config::{CronConfig, MissedPolicy};
use crate::platform::{ChatKind, ChatRef, InboundEvent};
use crate::store::{CronJob, Store, now_ms};
use crate::tools::{ToolError, arg_opt_str, arg_str};

/// Longest prompt a job keeps.
const MAX_PROMPT_CHARS: usize = 4000;
/// Arguments that would aim a job elsewhere; refused by name.
const ELSEWHERE: &[&str] = &["platform", "chat", "chat_id", "channel", "target", "thread"];

/// One chat's jobs, for its conversation.
pub struct Desk {
    store: Store,
    settings: CronConfig,
    chat: ChatRef,
    kind: ChatKind,
    /// The message that opened the conversation: whom a call acts for
    /// when it does not say.
    opener: InboundEvent,
    confirm: Arc<dyn ClarifyBroker>,
    wake: Arc<Notify>,
}

impl Desk {
    /// The desk of the chat of `event` (the conversation's first), whose
    /// calls act for the sender of the turn they are made in; new jobs
    /// are confirmed through `confirm`; `wake` tells the scheduler of a
    /// change.
    pub fn new(
        store: Store,
        settings: CronConfig,
        event: &InboundEvent,
        confirm: Arc<dyn ClarifyBroker>,
        wake: Arc<Notify>,
    ) -> Self {
        Self {
            store,
            settings,
            chat: event.chat(),
            kind: event.kind,
            opener: event.clone(),
            confirm,
            wake,
        }
    }

    /// This chat's job named by `args.job_id` (its id or its name).
    async fn own_job(&self, args: &Value) -> Result<CronJob, ToolError> {
        let id = arg_str(args, "job_id")?;
        let job = self.store.job(id).await.map_err(failed)?;
        match job {
            Some(job)
                if job.platform == self.chat.platform.as_str() && job.chat_id == self.chat.chat =>
            {
                Ok(job)
            }
            _ => Err(ToolError::InvalidArgs(format!(
                "no job {id:?} in this chat (cronjob list shows them)"
            ))),
        }
    }

    /// Makes a job for `by`, the message whose turn asks for it: its
    /// sender owns it, and it keeps that message, its words left out
    /// ([`CronJob::owner_event`]).
    async fn create(
        &self,
        args: &Value,
        by: &InboundEvent,
        cancel: &CancellationToken,
    ) -> Result<String, ToolError> {
        let owner = by.actor();
        if let Some(key) = ELSEWHERE
            .iter()
            .find(|k| args.get(**k).is_some_and(|v| !v.is_null()))
        {
            return Err(ToolError::InvalidArgs(format!(
                "`{key}`: a job posts to the chat it is made in, and nowhere else"
            )));
        }
        let schedule_text = arg_str(args, "schedule")?.trim().to_string();
        let timezone = arg_opt_str(args, "timezone")
            .unwrap_or("UTC")
            .trim()
            .to_string();
        let schedule = Schedule::parse(&schedule_text, &timezone)
            .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let prompt = arg_str(args, "prompt")?.trim().to_string();
        if prompt.is_empty() || prompt.chars().count() > MAX_PROMPT_CHARS {
            return Err(ToolError::InvalidArgs(format!(
                "prompt: say what to do at each run, in at most {MAX_PROMPT_CHARS} characters"
            )));
        }
        let name = arg_opt_str(args, "name")
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map_or_else(
                || crate::render::clip(&prompt, 40),
                |n| crate::render::clip(n, 60),
            );
        let missed = match arg_opt_str(args, "missed").unwrap_or("skip") {
            "skip" => MissedPolicy::Skip,
            "once" => MissedPolicy::Once,
            "all" => MissedPolicy::All,
            other => {
                return Err(ToolError::InvalidArgs(format!(
                    "missed: {other:?} is not skip, once or all"
                )));
            }
        };
        self.room_for(&owner).await?;
        let now = now_ms();
        let Some(first) = schedule.next_after(now, now) else {
            return Err(ToolError::InvalidArgs(
                "that moment has passed: the job would never run".into(),
            ));
        };
        let question = format!(
            "Create the scheduled job \"{name}\" ({schedule_text}, {timezone}), first run {}, posting here: \"{}\"?",
            utc(first),
            crate::render::clip(&prompt, 200)
        );
        let answer = self
            .confirm
            .ask(
                &question,
                &["Create".into(), "Cancel".into()],
                Some(&by.user_id),
                cancel,
            )
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        if !answer.trim().eq_ignore_ascii_case("create") {
            return Ok(json!({"created": false, "reason": "the user did not confirm"}).to_string());
        }
        let job = CronJob {
            id: crate::store::new_id()[..10].to_string(),
            name,
            origin: "chat".into(),
            schedule: schedule_text,
            timezone,
            prompt,
            toolsets: (self.kind == ChatKind::Group)
                .then(|| self.settings.group_toolsets.join(",")),
            platform: self.chat.platform.to_string(),
            chat_id: self.chat.chat.clone(),
            thread_id: self.chat.thread.clone(),
            owner_user: owner.user_id.clone(),
            owner_chat: self.chat.chat.clone(),
            owner_thread: self.chat.thread.clone(),
            owner_event: serde_json::to_string(&InboundEvent {
                text: String::new(),
                attachments: Vec::new(),
                ..by.clone()
            })
            .unwrap_or_default(),
            missed: missed.as_str().into(),
            missed_limit: 5,
            paused: 0,
            next_at: Some(first),
            created_at: now,
            updated_at: now,
        };
        // Counted again as it is stored: the confirmation may have waited
        // minutes, while the same person made jobs in other conversations.
        let most = self.settings.max_jobs_per_user as i64;
        if !self.store.add_chat_job(&job, most).await.map_err(failed)? {
            return Err(full(&owner, most));
        }
        self.wake.notify_one();
        tracing::info!(job = %job.id, owner = %owner.key(), "job made from a chat");
        Ok(json!({"created": true, "job": describe(&job)}).to_string())
    }

    /// Refuses when `owner` keeps `cron.max_jobs_per_user` jobs already.
    async fn room_for(&self, owner: &crate::platform::Actor) -> Result<(), ToolError> {
        let owned = self
            .store
            .jobs_owned(&owner.platform, &owner.user_id)
            .await
            .map_err(failed)?;
        if owned >= self.settings.max_jobs_per_user as i64 {
            return Err(full(owner, owned));
        }
        Ok(())
    }

    async fn list(&self) -> Result<String, ToolError> {
        let jobs = self
            .store
            .jobs_of_chat(&self.chat.platform, &self.chat.chat)
            .await
            .map_err(failed)?;
        let mut out = Vec::new();
        for job in &jobs {
            let mut entry = describe(job);
            if let Some(last) = self
                .store
                .runs(Some(&job.id), 1)
                .await
                .map_err(failed)?
                .first()
            {
                entry["last_run"] = json!({
                    "slot": utc(last.slot_at),
                    "status": last.status,
                    "delivery": last.delivery,
                    "detail": last.detail,
                });
            }
            out.push(entry);
        }
        Ok(json!({"jobs": out}).to_string())
    }

    async fn runs(&self, args: &Value) -> Result<String, ToolError> {
        let job = self.own_job(args).await?;
        let runs: Vec<Value> = self
            .store
            .runs(Some(&job.id), 10)
            .await
            .map_err(failed)?
            .into_iter()
            .map(|r| {
                json!({
                    "slot": utc(r.slot_at),
                    "status": r.status,
                    "delivery": r.delivery,
                    "detail": r.detail,
                })
            })
            .collect();
        Ok(json!({"job": job.id, "runs": runs}).to_string())
    }

    /// Pauses, resumes or deletes this chat's job for `by`, once the job's
    /// owner allows it in this chat: a shared chat's member, or words
    /// planted in what a turn read, do not stop, restart or delete a job
    /// alone.
    async fn change(
        &self,
        action: &str,
        args: &Value,
        by: &InboundEvent,
        cancel: &CancellationToken,
    ) -> Result<String, ToolError> {
        let job = self.own_job(args).await?;
        if job.origin == "config" {
            return Err(ToolError::Failed(format!(
                "{} is configured in gateway.toml; it is changed there",
                job.name
            )));
        }
        let actor = by.actor();
        if job.owner_user.is_empty() {
            return Err(ToolError::Failed(format!(
                "{} has no owner to ask; it is changed by an operator",
                job.name
            )));
        }
        // Asked of the owner even in their own turn: words planted in what
        // the turn read (a shared chat's history, a page, a tool's output)
        // must not stop, restart or delete a job alone, as they cannot make
        // one.
        let what = format!(
            "scheduled job \"{}\" ({}, {})",
            job.name, job.schedule, job.timezone
        );
        let question = if job.owner_user == actor.user_id {
            let verb = match action {
                "delete" => "Delete",
                "pause" => "Pause",
                _ => "Resume",
            };
            format!("{verb} your {what}?")
        } else {
            // The requester by id as well as by name: a display name is
            // theirs to choose.
            format!(
                "{} (user {}) asks to {action} your {what}. Allow it?",
                crate::render::clip(&actor.shown(), 60),
                actor.user_id,
            )
        };
        let answer = self
            .confirm
            .ask(
                &question,
                &["Allow".into(), "Deny".into()],
                Some(&job.owner_user),
                cancel,
            )
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        if !answer.trim().eq_ignore_ascii_case("allow") {
            return Ok(json!({
                "job": job.id,
                "done": false,
                "reason": "the job's owner did not allow it"
            })
            .to_string());
        }
        // As it is now: it may have changed while its owner was asked, and
        // it must still be the job, and the owner, asked about.
        let now = self.own_job(&json!({"job_id": job.id})).await?;
        if now.id != job.id || now.owner_user != job.owner_user || now.origin != job.origin {
            return Err(ToolError::Failed(format!(
                "{} changed while its owner was asked; ask again",
                job.name
            )));
        }
        let job = now;
        match action {
            "delete" => {
                self.store.delete_job(&job.id).await.map_err(failed)?;
            }
            "pause" => {
                self.store
                    .pause_job(&job.id, true, None)
                    .await
                    .map_err(failed)?;
            }
            _ => {
                let schedule = Schedule::parse(&job.schedule, &job.timezone)
                    .map_err(|e| ToolError::Failed(e.to_string()))?;
                let next = schedule.next_after(now_ms(), job.created_at);
                self.store
                    .pause_job(&job.id, false, next)
                    .await
                    .map_err(failed)?;
                self.wake.notify_one();
            }
        }
        tracing::info!(job = %job.id, action, by = %by.actor().key(), "job changed from a chat");
        Ok(json!({"job": job.id, "done": action}).to_string())
    }
}

#[async_trait::async_trait]
impl JobDesk for Desk {
    async fn cronjob(
        &self,
        args: &Value,
        by: Option<&InboundEvent>,
        cancel: &CancellationToken,
    ) -> Result<String, ToolError> {
        let by = by.unwrap_or(&self.opener);
        match arg_str(args, "action")? {
            "create" => self.create(args, by, cancel).await,
            "list" => self.list().await,
            "runs" => self.runs(args).await,
            action @ ("pause" | "resume" | "delete") => self.change(action, args, by, cancel).await,
            other => Err(ToolError::InvalidArgs(format!(
                "action {other:?} is not create, list, runs, pause, resume or delete"
            ))),
        }
    }
}

fn failed(err: crate::store::StoreError) -> ToolError {
    ToolError::Failed(err.to_string())
}

/// A job as the model sees it.
fn describe(job: &CronJob) -> Value {
    json!({
        "job_id": job.id,
        "name": job.name,
        "schedule": job.schedule,
        "timezone": if job.timezone.is_empty() { "UTC" } else { &job.timezone },
        "prompt": crate::render::clip(&job.prompt, 200),
        "paused": job.paused != 0,
        "next_run": job.next_at.filter(|_| job.paused == 0).map(utc),
        "origin": job.origin,
    })
}

/// `owner` keeps `owned` jobs, the most one person may.
fn full(owner: &crate::platform::Actor, owned: i64) -> ToolError {
    ToolError::Failed(format!(
        "{} already keeps {owned} jobs, the most one person may; delete one first",
        owner.shown()
    ))
}
