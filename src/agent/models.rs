//! Which model answers a session: the main endpoint with the session's
//! model name (chosen in the chat with `/model`, or configured per user,
//! chat or platform), and the `[[llm.fallback]]` endpoints, tried in order
//! when the main one keeps failing after its retries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use super::provider::{
    CUT_OFF, ChatModel, ChatRequest, ChatResponse, FinishReason, ModelEndpoint, ProviderError,
    Usage, chat_with_retries,
};
use crate::config::{Config, Env};
use crate::store::Session;

/// The models of a gateway.
pub struct Models {
    main: Arc<dyn ChatModel>,
    /// Fallback endpoints with their model names (for logs).
    fallbacks: Vec<(String, Arc<dyn ChatModel>)>,
    default: String,
    allowed: Vec<String>,
    by_platform: BTreeMap<String, String>,
    by_chat: BTreeMap<String, String>,
    by_user: BTreeMap<String, String>,
    retries: u32,
}

impl Models {
    /// The models `config` describes, reached over `http`.
    pub fn from_config(config: &Config, env: &Env, http: reqwest::Client) -> Self {
        let llm = &config.llm;
        Self {
            main: ModelEndpoint::main(config, env).client(http.clone()),
            fallbacks: llm
                .fallback
                .iter()
                .map(|f| {
                    let endpoint = ModelEndpoint::derived(config, env, f);
                    (endpoint.model.clone(), endpoint.client(http.clone()))
                })
                .collect(),
            default: llm.model.clone(),
            allowed: llm.models.clone(),
            by_platform: llm.model_by_platform.clone(),
            by_chat: llm.model_by_chat.clone(),
            by_user: llm.model_by_user.clone(),
            retries: llm.max_retries,
        }
    }

    /// Puts `main` in place of the main endpoint (benches, tests).
    pub fn set_main(&mut self, main: Arc<dyn ChatModel>) {
        self.main = main;
    }

    /// The model a session talks to: its own choice (`/model`), else its
    /// user's, its chat's, its platform's, else the default.
    pub fn for_session<'a>(&'a self, session: &'a Session) -> &'a str {
        fn keyed<'m>(
            map: &'m BTreeMap<String, String>,
            platform: &str,
            id: Option<&str>,
        ) -> Option<&'m str> {
            map.get(&format!("{platform}:{}", id?)).map(String::as_str)
        }
        let platform = session.platform.as_str();
        session
            .model
            .as_deref()
            .or_else(|| keyed(&self.by_user, platform, session.user_id.as_deref()))
            .or_else(|| keyed(&self.by_chat, platform, Some(&session.chat_id)))
            .or_else(|| self.by_platform.get(platform).map(String::as_str))
            .unwrap_or(&self.default)
    }

    /// What `/model NAME` may choose.
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// One call to `model` on the main endpoint, with retries; while the
    /// failure is one another endpoint might not have, the fallbacks are
    /// asked in order (each with its own model and retries). When every
    /// one failed and a streamed answer had broken after writing text, the
    /// longest such text is the answer, ended with [`CUT_OFF`].
    pub async fn chat(
        &self,
        request: ChatRequest,
        model: &str,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        self.chat_in(request, model, &Route::default(), cancel)
            .await
    }

    /// [`chat`](Self::chat) within a turn: the calls of one turn go to the
    /// endpoint that answered the last one, so a turn whose main model
    /// failed past its retries stays on the fallback that answered instead
    /// of waiting through the main model's retries at every step.
    pub async fn chat_in(
        &self,
        mut request: ChatRequest,
        model: &str,
        route: &Route,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let first = route.0.load(Ordering::Relaxed).min(self.fallbacks.len());
        let mut result = Err(ProviderError::Transport("no endpoint was asked".into()));
        let mut kept = None;
        for at in first..=self.fallbacks.len() {
            let endpoint: &dyn ChatModel = match at {
                0 => {
                    request.model = Some(model.to_string());
                    self.main.as_ref()
                }
                n => {
                    let (name, fallback) = &self.fallbacks[n - 1];
                    if let Err(err) = &result {
                        tracing::warn!(error = %err, fallback = %name, "model failed; asking the fallback");
                    }
                    request.model = None;
                    fallback.as_ref()
                }
            };
            result = chat_with_retries(endpoint, &request, self.retries, cancel).await;
            kept = broken_text(&result, kept);
            match &result {
                Ok(_) => {
                    route.0.store(at, Ordering::Relaxed);
                    break;
                }
                Err(err) if err.retryable() => {}
                Err(_) => break,
            }
        }
        match (result, kept) {
            (Err(err), Some(partial)) if err.retryable() => {
                tracing::warn!(error = %err, "the model's stream broke for good; its text so far is the answer");
                Ok(ChatResponse {
                    content: format!("{partial}\n\n{CUT_OFF}"),
                    tool_calls: Vec::new(),
                    finish: FinishReason::Stop,
                    usage: Usage::default(),
                })
            }
            (result, _) => result,
        }
    }
}

impl Models {
    /// The model that answered the last call of a turn on `route`, whose
    /// session's model is `model`.
    pub fn answering<'a>(&'a self, route: &Route, model: &'a str) -> &'a str {
        match route.0.load(Ordering::Relaxed) {
            0 => model,
            n => self.fallbacks.get(n - 1).map_or(model, |(name, _)| name),
        }
    }

    /// The fallback models' names, in order.
    pub fn fallback_names(&self) -> impl Iterator<Item = &str> {
        self.fallbacks.iter().map(|(name, _)| name.as_str())
    }
}

/// Which endpoint a turn's calls go to first: 0 the main one, n the n-th
/// fallback. A fresh one (each turn's) starts with the main endpoint.
#[derive(Debug, Default)]
pub struct Route(AtomicUsize);

/// The longer of `kept` and the text `result`'s broken stream left.
fn broken_text(
    result: &Result<ChatResponse, ProviderError>,
    kept: Option<String>,
) -> Option<String> {
    match result {
        Err(ProviderError::Broken { partial, .. })
            if kept.as_ref().is_none_or(|k| k.len() < partial.len()) =>
        {
            Some(partial.clone())
        }
        _ => kept,
    }
}
