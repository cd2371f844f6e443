//! Reports into a session from outside a conversation (a background
//! process that ended) and scheduled jobs' runs, posted as turns of their
//! own through the inbox, so that they survive a restart like any event.

use crate::platform::ChatKind;
use crate::store::{CronJob, ProcessWatch, StoreError};
use crate::tools::builtin::ProcessReports;

use super::{InboundEvent, SessionManager, Submitted};

impl SessionManager {
    /// Posts `text` into `watch`'s session as a turn of its own, once per
    /// `id` (it is the event's dedupe key), addressed as the event whose
    /// turn started the process: to its chat and thread, from its sender.
    /// A watch kept without it (by a replica from before watches kept it)
    /// is addressed as the session's latest message, as it was then. Its
    /// sender must still pass the platform's access rules.
    async fn report(
        &self,
        watch: &ProcessWatch,
        id: &str,
        text: &str,
    ) -> Result<Submitted, StoreError> {
        let origin = if watch.origin.is_empty() {
            match self.inner.store.inbox_last_of(&watch.session_key).await? {
                Some(last) => last.payload,
                None => return Ok(Submitted::Ignored("the session has no event to answer")),
            }
        } else {
            watch.origin.clone()
        };
        let Ok(mut event) = serde_json::from_str::<InboundEvent>(&origin) else {
            return Ok(Submitted::Ignored(
                "the event that started the process is unknown",
            ));
        };
        if !self.starter_may_hear(&watch.session_key, &event).await? {
            return Ok(Submitted::Ignored(
                "the process's starter may no longer reach the agent",
            ));
        }
        event.text = crate::store::storable(text).into_owned();
        event.event_id = id.to_string();
        event.message_id = None;
        event.attachments.clear();
        event.mentioned = true;
        let dedupe = format!("{}:{id}", event.platform);
        Ok(self
            .enqueue(
                &watch.session_key,
                event,
                &dedupe,
                super::intake::Origin::Gateway,
            )
            .await?
            .0)
    }

    /// Whether the report of a process started in session `key` by
    /// `origin`'s turn may run as its sender: they still pass the
    /// platform's access rules (with the roles they had then). In a
    /// scheduled job's run, the sender is the job's: the job's owner must
    /// still be allowed ([`owner_may_run`](Self::owner_may_run)).
    async fn starter_may_hear(&self, key: &str, origin: &InboundEvent) -> Result<bool, StoreError> {
        if let Some(id) = crate::cron::job_of_session(key) {
            return match self.inner.store.job(id).await? {
                Some(job) => self.owner_may_run(&job).await,
                // Deleted since: nobody's job to run as.
                None => Ok(false),
            };
        }
        let Some(profile) = self.inner.platforms().profile(&origin.platform) else {
            return Ok(false);
        };
        Ok(
            super::access::check(&profile.access, origin, &self.inner.store).await?
                == super::access::Access::Allowed,
        )
    }

    /// Hands `job`'s run at `slot` to a session of its own, stored in the
    /// inbox under `dedupe` (so it is run once however often it is
    /// handed); its answer goes to the job's chat.
    pub async fn run_job(
        &self,
        job: &CronJob,
        slot: i64,
        dedupe: &str,
    ) -> Result<Submitted, StoreError> {
        if self.inner.platforms().profile(&job.platform).is_none() {
            return Ok(Submitted::Ignored("the job's platform is not configured"));
        }
        let user_id = if job.owner_user.is_empty() {
            crate::cron::NO_OWNER.to_string()
        } else {
            job.owner_user.clone()
        };
        let event = InboundEvent {
            platform: job.platform.as_str().into(),
            kind: ChatKind::Group,
            chat_id: job.chat_id.clone(),
            thread_id: job.thread_id.clone(),
            user_id,
            user_name: format!("scheduled job {}", job.name),
            roles: Vec::new(),
            text: crate::store::storable(&format!(
                "[Scheduled job \"{}\" ({}), run for its slot at {}. Its answer is posted to the chat.]\n\n{}",
                job.name,
                job.schedule,
                crate::budgets::utc(slot),
                job.prompt
            ))
            .into_owned(),
            event_id: dedupe.to_string(),
            message_id: None,
            mentioned: true,
            from_bot: false,
            in_thread: false,
            attachments: Vec::new(),
            revision: Default::default(),
        };
        Ok(self
            .enqueue(dedupe, event, dedupe, super::intake::Origin::Gateway)
            .await?
            .0)
    }

    /// Whether `job` may run as the person who made it in a chat: the
    /// message it was made from would still pass the platform's access
    /// rules (with the roles its sender had then); one that cannot be read
    /// may not. A job kept without that message (made before it was kept)
    /// is checked by
    /// [`access::still_allowed`](super::access::still_allowed). A job from
    /// the configuration acts for no one and always may; so does one whose
    /// platform is not configured (its run says why it is not run).
    pub async fn owner_may_run(&self, job: &CronJob) -> Result<bool, StoreError> {
        if job.origin != "chat" {
            return Ok(true);
        }
        let Some(profile) = self.inner.platforms().profile(&job.platform) else {
            return Ok(true);
        };
        if !job.owner_event.is_empty() {
            let Ok(made_from) = serde_json::from_str::<InboundEvent>(&job.owner_event) else {
                tracing::warn!(job = %job.id, "the message a job was made from is unreadable; refused");
                return Ok(false);
            };
            // Its sender and chat, whatever the stored JSON says: the
            // job's owner, where it posts.
            let made_from = InboundEvent {
                platform: job.platform.as_str().into(),
                user_id: job.owner_user.clone(),
                chat_id: job.chat_id.clone(),
                from_bot: false,
                ..made_from
            };
            return Ok(
                super::access::check(&profile.access, &made_from, &self.inner.store).await?
                    == super::access::Access::Allowed,
            );
        }
        super::access::still_allowed(
            &profile.access,
            &job.platform,
            &job.owner_user,
            &self.inner.store,
        )
        .await
    }

    /// The platforms answers go through.
    pub fn platforms(&self) -> &std::sync::Arc<crate::platform::Platforms> {
        self.inner.platforms()
    }
}

#[async_trait::async_trait]
impl ProcessReports for SessionManager {
    async fn keep(&self, watch: &ProcessWatch) {
        if let Err(err) = self.inner.store.watch_process(watch).await {
            tracing::warn!(process = %watch.id, error = %err, "process watch not stored; a restart will not report it");
        }
    }

    async fn tell(&self, watch: &ProcessWatch, what: &str, text: &str, last: bool) {
        let store = &self.inner.store;
        let id = format!("process:{}:{what}", watch.id);
        loop {
            match self.report(watch, &id, text).await {
                Ok(Submitted::Busy) => {
                    // The gateway is full: try again shortly, it is only
                    // a report.
                    tokio::select! {
                        _ = self.inner.stop.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                    }
                }
                Ok(outcome) => {
                    tracing::info!(process = %watch.id, report = what, ?outcome, "process report posted");
                    break;
                }
                Err(err) if store.failed_from_away(&err).await => {
                    // Left to the next start when the daemon stops first:
                    // the watch is still stored.
                    if !store.until_back(&self.inner.stop).await {
                        return;
                    }
                }
                Err(err) => {
                    tracing::error!(process = %watch.id, error = %err, "process report not posted");
                    break;
                }
            }
        }
        if last && let Err(err) = store.unwatch_process(&watch.id).await {
            tracing::warn!(process = %watch.id, error = %err, "process watch not cleared; a restart reports it again (once)");
        }
    }
}
