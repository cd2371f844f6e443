//! Where a webhook run's answer goes: one bot comment per pull request
//! through the GitHub REST API (created, then updated), a chat on a
//! connected platform, or the log. Failed deliveries are retried with
//! backoff and every attempt is recorded.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::config::{DeliverKind, Env, WebhookRoute};
use crate::forge::api::{Api, Dialect, Failure};
use crate::forge::auth::Credentials;
use crate::platform::{ChatRef, PlatformError, Platforms};
use crate::sessions::Deliveries;
use crate::telemetry::events;

/// GitHub refuses comments longer than 65 536 characters.
const COMMENT_CHARS: usize = 65_000;
const ATTEMPTS: u32 = 4;

/// A pull request or issue named by an entity `github:<owner>/<repo>:pr:<n>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueRef {
    /// `owner/repo`.
    pub repo: String,
    /// Pull request or issue number.
    pub number: u64,
}

impl IssueRef {
    /// Parses an entity; `None` when it names no PR or issue.
    pub fn parse(entity: &str) -> Option<Self> {
        let rest = entity.strip_prefix("github:")?;
        let (repo, tail) = rest.rsplit_once(':')?;
        let number = tail.parse().ok()?;
        let repo = repo
            .strip_suffix(":pr")
            .or_else(|| repo.strip_suffix(":issue"))?;
        let repo = crate::forge::scope::repo_name(repo).filter(|r| r.split('/').count() == 2)?;
        Some(Self { repo, number })
    }
}

/// A GitHub REST client for issue comments, on the forge's one GitHub
/// API (its rate-limit rules included).
#[derive(Clone, Debug)]
pub struct GithubClient {
    api: Api,
}

impl GithubClient {
    /// A client for `api` (`https://api.github.com` or an Enterprise or
    /// test server) with `token`.
    pub fn new(api: &str, token: &str) -> Self {
        Self {
            api: Api::new(
                api,
                Dialect::Github,
                Credentials::Token(std::sync::Arc::from(token)),
            ),
        }
    }

    /// The login the token belongs to (`GET /user`): comments by it are the
    /// gateway's own.
    pub async fn login(&self) -> Result<String, Failure> {
        let me = self.api.get("/user", None).await?;
        me.json()["login"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Failure::fatal("GitHub's answer names no login"))
    }

    /// Posts a new comment; returns its id.
    pub async fn create_comment(&self, issue: &IssueRef, body: &str) -> Result<String, Failure> {
        let path = format!("/repos/{}/issues/{}/comments", issue.repo, issue.number);
        let created = self
            .api
            .send(Method::POST, &path, &json!({ "body": body }), None)
            .await?;
        created
            .get("id")
            .map(|id| match id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .ok_or_else(|| Failure::fatal("GitHub's answer has no comment id"))
    }

    /// Replaces a comment's text.
    pub async fn update_comment(&self, repo: &str, id: &str, body: &str) -> Result<(), Failure> {
        let path = format!("/repos/{repo}/issues/comments/{id}");
        self.api
            .send(Method::PATCH, &path, &json!({ "body": body }), None)
            .await
            .map(|_| ())
    }
}

/// Delivers one route's answers.
#[derive(Clone)]
pub struct Deliverer {
    route: WebhookRoute,
    records: Deliveries,
    github: Option<GithubClient>,
    platforms: Arc<Platforms>,
    backoff: Duration,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("route", &self.route.name)
            .finish_non_exhaustive()
    }
}

impl Deliverer {
    /// The deliverer of `route`.
    pub fn new(
        route: &WebhookRoute,
        env: &Env,
        records: Deliveries,
        platforms: Arc<Platforms>,
    ) -> Self {
        let github = (route.deliver.kind == DeliverKind::GithubComment).then(|| {
            let token = env.get(&route.deliver.token_env).unwrap_or_default();
            GithubClient::new(&route.deliver.api_url, token)
        });
        Self {
            route: route.clone(),
            records,
            github,
            platforms,
            backoff: Duration::from_secs(1),
        }
    }

    /// The GitHub client, when this route answers on pull requests.
    pub fn github(&self) -> Option<&GithubClient> {
        self.github.as_ref()
    }

    fn target(&self) -> String {
        match self.route.deliver.kind {
            DeliverKind::GithubComment => "github_comment".into(),
            DeliverKind::Chat => format!(
                "chat:{}:{}",
                self.route.deliver.platform.as_deref().unwrap_or("?"),
                self.route.deliver.chat.as_deref().unwrap_or("?")
            ),
            DeliverKind::Log => "log".into(),
        }
    }

    /// Delivers `text` about `entity`, retrying transient failures a few
    /// times, and records the outcome; the error of the last attempt when
    /// it did not get through (transient ones as
    /// [`PlatformError::Unavailable`], for the caller to try later).
    pub async fn deliver(&self, entity: &str, text: &str) -> Result<(), PlatformError> {
        let record = match self
            .records
            .start(&self.route.name, entity, &self.target())
            .await
        {
            Ok(id) => Some(id),
            Err(err) => {
                tracing::warn!(error = %err, "could not record the delivery");
                None
            }
        };
        let mut wait = self.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.attempt(entity, text).await;
            let last = attempt == ATTEMPTS || result.as_ref().is_err_and(|f| !f.retry);
            if let Some(id) = record {
                let error = result.as_ref().err().map(|f| f.message.as_str());
                if let Err(err) = self.records.attempt(id, error, last).await {
                    tracing::warn!(error = %err, "could not record the delivery attempt");
                }
            }
            match result {
                Ok(()) => {
                    events::emit(events::Delivered { ok: true });
                    break Ok(());
                }
                Err(f) if last => {
                    tracing::error!(route = %self.route.name, entity, error = %f.message, attempts = attempt, "delivery failed");
                    events::emit(events::Delivered { ok: false });
                    break Err(f.platform());
                }
                Err(f) => {
                    tracing::warn!(route = %self.route.name, entity, error = %f.message, attempt, "delivery failed; retrying");
                    // What GitHub asks for, up to a minute here; longer waits are
                    // the outbox's.
                    let asked = f.wait.unwrap_or_default().min(Duration::from_secs(60));
                    tokio::time::sleep(asked.max(wait)).await;
                    wait *= 2;
                }
            }
        }
    }

    async fn attempt(&self, entity: &str, text: &str) -> Result<(), Failure> {
        match self.route.deliver.kind {
            DeliverKind::Log => {
                tracing::info!(route = %self.route.name, entity, answer = %text, "webhook answer");
                Ok(())
            }
            DeliverKind::Chat => {
                let platform = self.route.deliver.platform.as_deref().unwrap_or_default();
                let chat = self.route.deliver.chat.as_deref().unwrap_or_default();
                let port = self
                    .platforms
                    .port(platform)
                    .ok_or_else(|| Failure::transient(format!("{platform} is not connected")))?;
                let text = format!("[{}] {entity}\n\n{text}", self.route.name);
                let to = ChatRef {
                    platform: platform.into(),
                    chat: chat.to_string(),
                    thread: None,
                };
                // Rate limits and outages are the retry loop's to wait out.
                port.send(&to, None, &text)
                    .await
                    .map(|_| ())
                    .map_err(|e| match e {
                        PlatformError::RateLimited { .. } | PlatformError::Unavailable(_) => {
                            Failure::transient(e.to_string())
                        }
                        PlatformError::NotFound(_) | PlatformError::Rejected(_) => {
                            Failure::fatal(e.to_string())
                        }
                    })
            }
            DeliverKind::GithubComment => {
                let github = self
                    .github
                    .as_ref()
                    .ok_or_else(|| Failure::fatal("no GitHub client"))?;
                let issue = IssueRef::parse(entity).ok_or_else(|| {
                    Failure::fatal(format!("{entity} names no pull request to comment on"))
                })?;
                let body = crate::render::clip(text, COMMENT_CHARS);
                let existing = self
                    .records
                    .comment(entity)
                    .await
                    .map_err(|e| Failure::transient(e.to_string()))?;
                if let Some(id) = existing {
                    match github.update_comment(&issue.repo, &id, &body).await {
                        Ok(()) => return Ok(()),
                        // Deleted by someone: post a new one.
                        Err(f) if f.status == 404 => {}
                        Err(f) => return Err(f),
                    }
                }
                let id = github.create_comment(&issue, &body).await?;
                self.records
                    .set_comment(entity, &id)
                    .await
                    .map_err(|e| Failure::transient(e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IssueRef;

    #[test]
    fn entities_name_issues() {
        assert_eq!(
            IssueRef::parse("github:octo/hello:pr:12"),
            Some(IssueRef {
                repo: "octo/hello".into(),
                number: 12
            })
        );
        assert_eq!(
            IssueRef::parse("github:octo/hello:issue:3").map(|i| i.number),
            Some(3)
        );
        assert_eq!(IssueRef::parse("github:octo/hello:run:3"), None);
        assert_eq!(IssueRef::parse("github:../x:pr:1"), None);
        assert_eq!(IssueRef::parse("gitlab:a/b:mr:1"), None);
    }
}
