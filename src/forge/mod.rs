//! Code review and CI triage on a forge (GitHub, GitLab) for webhook
//! routes with `[webhook.routes.forge]`.
//!
//! - [`scope`]: what an event lets its run reach, fixed when it arrives.
//! - [`tools`]: `forge_diff`, `forge_file`, `forge_ci_log`,
//!   `forge_thread`, read-only, confined to that scope, their output fenced
//!   as untrusted data.
//! - [`publish`]: the answer written back — a review with comments on diff
//!   lines (each finding once), the summary comment edited in place, a
//!   check run (or commit status) to gate merges, outdated threads
//!   resolved — every write recorded under an idempotency key; findings
//!   the change's people set aside ([`setaside`]) not raised again.
//! - [`host`]: what a forge does; [`github`] and [`gitlab`] speak their
//!   APIs through [`api`] (rate limits, App tokens from [`auth`]).

pub mod api;
pub mod auth;
pub mod diff;
pub mod findings;
pub mod github;
pub mod gitlab;
pub mod host;
pub mod publish;
pub mod scope;
mod setaside;
pub mod settings;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use crate::agent::layer::Opened;
use crate::config::{Config, Env, ForgeConfig, SignatureScheme, WebhookRoute};
use crate::platform::InboundEvent;
use crate::store::Store;
use api::{Api, Dialect};
use auth::{App, Credentials};
use host::{Host, User};
pub use scope::{Scope, Task};

/// GitHub's public API.
pub const GITHUB_API: &str = "https://api.github.com";
/// GitLab.com's API.
pub const GITLAB_API: &str = "https://gitlab.com/api/v4";

/// One route's forge.
#[derive(Debug)]
pub struct Forge {
    /// The route's name.
    pub route: String,
    /// Its settings.
    pub config: ForgeConfig,
    /// The forge's API.
    pub host: Arc<dyn Host>,
    /// Where reviews are remembered.
    store: Store,
    /// Who may give the bot commands (`.0`, the route's approvers and
    /// `commands_from`) and who may also lift its gate (`.1`, the
    /// approvers), as identities of the forge's platform (`.2`).
    trusted: (Vec<String>, Vec<String>, &'static str),
}

/// The forges of every route that has one.
#[derive(Debug, Default)]
pub struct Forges(HashMap<String, Arc<Forge>>);

/// Why a route's forge cannot be set up, or an event's scope read.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The App's key file cannot be read.
    #[error("webhook route {route}: cannot read forge.private_key_file {}: {source}", file.display())]
    KeyFile {
        /// The route.
        route: String,
        /// The configured file.
        file: std::path::PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The App's key is not a usable RSA key.
    #[error("webhook route {route}: forge.private_key_file {}: {source}", file.display())]
    Key {
        /// The route.
        route: String,
        /// The configured file.
        file: std::path::PathBuf,
        /// What is wrong with the key.
        source: auth::KeyError,
    },
    /// The token's variable is not set.
    #[error("webhook route {route}: forge token {var} is not set")]
    NoToken {
        /// The route.
        route: String,
        /// The variable.
        var: String,
    },
    /// The route's scheme has no forge (or not with these credentials).
    #[error(
        "webhook route {route}: forge reviews need scheme github, or gitlab with a token (scheme {scheme:?})"
    )]
    Scheme {
        /// The route.
        route: String,
        /// Its scheme.
        scheme: SignatureScheme,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A stored scope is not what this version writes.
    #[error("stored scope unreadable: {0}")]
    Scope(serde_json::Error),
}

/// The credentials `forge` names.
fn credentials(
    route: &WebhookRoute,
    forge: &ForgeConfig,
    env: &Env,
) -> Result<Credentials, ForgeError> {
    let name = &route.name;
    if let (Some(app_id), Some(file)) = (forge.app_id, &forge.private_key_file) {
        let pem = std::fs::read(file).map_err(|source| ForgeError::KeyFile {
            route: name.clone(),
            file: file.clone(),
            source,
        })?;
        let key = auth::read_key(&pem).map_err(|source| ForgeError::Key {
            route: name.clone(),
            file: file.clone(),
            source,
        })?;
        return Ok(Credentials::App(Arc::new(App::new(
            app_id,
            key,
            forge.installation_id,
        ))));
    }
    let var = forge.token_env.as_deref().unwrap_or(match route.scheme {
        SignatureScheme::Gitlab => "GITLAB_TOKEN",
        _ => "GITHUB_TOKEN",
    });
    let token = env
        .get(var)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ForgeError::NoToken {
            route: name.clone(),
            var: var.to_string(),
        })?;
    Ok(Credentials::Token(Arc::from(token)))
}

#[async_trait::async_trait]
impl crate::agent::layer::ForgeDesks for Forges {
    /// The forge tools of `event`'s run, when its route has a forge and
    /// the event a scope; the review's check is opened as the run starts.
    async fn desk(&self, event: &InboundEvent) -> Option<Opened> {
        if event.platform != crate::platform::WEBHOOK {
            return None;
        }
        let forge = self.get(&event.chat_id)?.clone();
        let entity = event.thread_id.clone().unwrap_or_default();
        let scope = match forge.scope_of(&event.event_id).await {
            Ok(Some(scope)) => scope,
            Ok(None) => return None,
            Err(err) => {
                tracing::warn!(route = %forge.route, event = %event.event_id, error = %err, "forge scope unreadable");
                return None;
            }
        };
        let scope = forge.settle(scope, &entity).await;
        // The answer is published against what the run read.
        if let Err(err) = forge.keep_scope(&event.event_id, &entity, &scope).await {
            tracing::warn!(route = %forge.route, error = %err, "settled forge scope not stored");
        }
        if let Some(why) = scope.skipped() {
            tracing::info!(route = %forge.route, entity, reason = %why, "forge run skipped under the repository's settings");
            return Some(Opened::Skipped(why));
        }
        if scope.task.reviews() {
            forge.begin(&event.event_id, &entity, &scope).await;
        }
        Some(Opened::Desk(Arc::new(tools::Desk::new(
            forge,
            scope,
            (event.event_id.clone(), entity),
        ))))
    }
}

impl Forges {
    /// The forges of `config`'s routes; an error names a route whose
    /// credentials cannot be read.
    pub fn from_config(config: &Config, env: &Env, store: &Store) -> Result<Self, ForgeError> {
        let mut forges = HashMap::new();
        if !config.webhook.enabled {
            return Ok(Self(forges));
        }
        for route in &config.webhook.routes {
            let Some(forge) = &route.forge else { continue };
            let creds = credentials(route, forge, env)?;
            let app = matches!(creds, Credentials::App(_));
            let host: Arc<dyn Host> = match route.scheme {
                SignatureScheme::Github => {
                    let base = forge.api_url.as_deref().unwrap_or(GITHUB_API);
                    Arc::new(github::Github::new(
                        Api::new(base, Dialect::Github, creds),
                        app,
                    ))
                }
                SignatureScheme::Gitlab if !app => {
                    let base = forge.api_url.as_deref().unwrap_or(GITLAB_API);
                    Arc::new(gitlab::Gitlab::new(Api::new(base, Dialect::Gitlab, creds)))
                }
                scheme => {
                    return Err(ForgeError::Scheme {
                        route: route.name.clone(),
                        scheme,
                    });
                }
            };
            forges.insert(
                route.name.clone(),
                Arc::new(Forge {
                    route: route.name.clone(),
                    config: forge.clone(),
                    host,
                    store: store.clone(),
                    trusted: (
                        route
                            .approvers
                            .iter()
                            .chain(&forge.commands_from)
                            .cloned()
                            .collect(),
                        route.approvers.clone(),
                        route.scheme.login_platform(),
                    ),
                }),
            );
        }
        Ok(Self(forges))
    }

    /// Route `route`'s forge.
    pub fn get(&self, route: &str) -> Option<&Arc<Forge>> {
        self.0.get(route)
    }

    /// Whether any route has one.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Forge {
    /// Whether `user` (of this forge) may give the bot commands, and set
    /// its findings aside.
    pub fn trusts(&self, user: &User) -> bool {
        self.named(&self.trusted.0, user)
    }

    /// Whether `user` is one of the route's approvers, whose "won't fix"
    /// lifts the gate.
    pub fn approves(&self, user: &User) -> bool {
        self.named(&self.trusted.1, user)
    }

    fn named(&self, names: &[String], user: &User) -> bool {
        names
            .iter()
            .any(|a| crate::config::identity::names(a, self.trusted.2, &user.login, user.account))
    }

    /// Stores `scope` as what event `event_id` (about `entity`) runs on.
    pub async fn keep_scope(
        &self,
        event_id: &str,
        entity: &str,
        scope: &Scope,
    ) -> Result<(), crate::store::StoreError> {
        let json = serde_json::to_string(scope).unwrap_or_default();
        self.store
            .forge_event_put(event_id, &self.route, entity, &json)
            .await
    }

    /// Pauses (or resumes) automatic reviews of change `entity`.
    pub async fn pause(&self, entity: &str, paused: bool) -> Result<(), crate::store::StoreError> {
        self.store.forge_pause(&self.route, entity, paused).await
    }

    /// Whether automatic reviews of change `entity` are paused (one never
    /// paused is not).
    pub async fn paused(&self, entity: &str) -> Result<bool, crate::store::StoreError> {
        Ok(self.store.forge_change(&self.route, entity).await?.1)
    }

    /// The stored scope of event `event_id`.
    pub async fn scope_of(&self, event_id: &str) -> Result<Option<Scope>, ForgeError> {
        let Some((_, _, scope)) = self.store.forge_event(event_id).await? else {
            return Ok(None);
        };
        serde_json::from_str(&scope)
            .map(Some)
            .map_err(ForgeError::Scope)
    }

    /// Fills in what the event did not say: the change a CI run belongs
    /// to, the change's SHAs, the head last reviewed.
    async fn settle(&self, mut scope: Scope, entity: &str) -> Scope {
        if scope.change.is_none() {
            match self.host.change_for(&scope).await {
                Ok(change) => scope.change = change,
                Err(err) => {
                    tracing::warn!(route = %self.route, error = %err, "could not find the change of a CI run")
                }
            }
        }
        let reading = scope.task != Task::Triage;
        // The settings come from the base as the forge has it now (the
        // event's may be stale: the change retargeted since), or, for a
        // CI run of no change, from the default branch: the change itself
        // has no say in how it is handled.
        let mut settings_at = None;
        if scope.change.is_some() {
            match self.host.state(&scope).await {
                Ok(state) => {
                    scope.base = Some(state.base);
                    settings_at = Some(state.settings_at);
                    if reading {
                        scope.head.get_or_insert(state.head);
                    }
                    scope.info = Some(state.info);
                }
                Err(err) => {
                    tracing::warn!(route = %self.route, error = %err, "could not read the change's state")
                }
            }
        } else if !reading {
            settings_at = scope.default_branch.clone();
        }
        if let Some(at) = settings_at {
            match self.host.file(&scope, settings::FILE, &at).await {
                Ok(text) => match settings::Settings::parse(&text) {
                    Ok(read) => scope.settings = read,
                    Err(why) => scope.settings_error = Some(why),
                },
                Err(err) if err.status == 404 => {}
                Err(err) => {
                    tracing::warn!(route = %self.route, error = %err, "could not read the repository's review settings; the route's apply")
                }
            }
        }
        // A bot is told by its account, asked only when it matters.
        if !scope.settings.bots
            && let Some(info) = scope.info.clone()
        {
            match self.host.author_is_bot(&scope, &info).await {
                Ok(bot) => scope.info = Some(scope::ChangeInfo { bot, ..info }),
                Err(err) => {
                    tracing::warn!(route = %self.route, error = %err, "could not tell whether the change's author is a bot")
                }
            }
        }
        if scope.task == Task::Review {
            match self.store.forge_change(&self.route, entity).await {
                Ok((since, _)) => scope.since = since.filter(|s| Some(s) != scope.head.as_ref()),
                Err(err) => {
                    tracing::warn!(route = %self.route, error = %err, "could not read the last review")
                }
            }
        }
        scope
    }
}
