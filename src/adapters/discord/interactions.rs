//! Slash commands and the answers owed to interactions. Discord wants an
//! interaction answered within 3 seconds: an answer that is not ready by
//! [`DEFER_AFTER`] is deferred, and the text that comes later edits the
//! deferred response. A command's reply comes from the session manager
//! like any other reply; [`Interactions`] routes it to the interaction.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serenity::builder::{
    CreateAllowedMentions, CreateCommand, CreateCommandOption, CreateInteractionResponse,
    CreateInteractionResponseFollowup, CreateInteractionResponseMessage, EditInteractionResponse,
};
use serenity::http::Http;
use serenity::model::application::{CommandDataOptionValue, CommandInteraction, CommandOptionType};
use serenity::model::id::InteractionId;

/// How long an interaction may wait for its answer before it is deferred.
pub const DEFER_AFTER: Duration = Duration::from_millis(2000);

/// The slash commands registered at start.
pub fn commands() -> Vec<CreateCommand> {
    vec![
        CreateCommand::new("new").description("Start a new conversation"),
        CreateCommand::new("stop").description("Stop the running turn"),
        CreateCommand::new("status").description("Show this conversation's status"),
        CreateCommand::new("usage").description("Show what you and this chat spent"),
        CreateCommand::new("approve")
            .description("Allow the pending command")
            .add_option(
                CreateCommandOption::new(CommandOptionType::String, "scope", "How far it goes")
                    .add_string_choice("once", "once")
                    .add_string_choice("this session", "session")
                    .add_string_choice("always", "always"),
            ),
        CreateCommand::new("deny")
            .description("Deny the pending command")
            .add_option(CreateCommandOption::new(
                CommandOptionType::String,
                "reason",
                "Why (the agent sees it)",
            )),
        CreateCommand::new("model")
            .description("Show or switch this conversation's model")
            .add_option(CreateCommandOption::new(
                CommandOptionType::String,
                "name",
                "The model to switch to (default: the configured one)",
            )),
        CreateCommand::new("help").description("What the bot can do"),
    ]
}

/// The text a slash command stands for (`/approve session`), or `None` for
/// a command the bot does not have.
pub fn command_text(cmd: &CommandInteraction) -> Option<String> {
    let name = cmd.data.name.as_str();
    if !matches!(
        name,
        "new" | "stop" | "status" | "usage" | "model" | "approve" | "deny" | "help"
    ) {
        return None;
    }
    let mut text = format!("/{name}");
    for option in &cmd.data.options {
        if let CommandDataOptionValue::String(value) = &option.value
            && (option.name == "scope" && value != "once"
                || option.name == "reason"
                || option.name == "name")
        {
            text.push(' ');
            text.push_str(value.trim());
        }
    }
    Some(text)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    Deferred,
    Answered,
}

/// An interaction that still owes its user an answer.
#[derive(Debug)]
pub struct Pending {
    id: InteractionId,
    token: String,
    /// A button press (deferred as an update of its message) rather than
    /// a command.
    component: bool,
    state: tokio::sync::Mutex<State>,
}

fn no_pings() -> CreateAllowedMentions {
    CreateAllowedMentions::new()
}

impl Pending {
    /// An interaction not answered yet; `component` for a button press.
    pub fn new(id: InteractionId, token: &str, component: bool) -> Arc<Self> {
        Arc::new(Self {
            id,
            token: token.to_string(),
            component,
            state: tokio::sync::Mutex::new(State::Fresh),
        })
    }

    /// Answers with `chunks` (the first as the response, the rest as
    /// follow-ups); `ephemeral` shows them to the user alone.
    pub async fn answer(&self, http: &Http, chunks: &[String], ephemeral: bool) {
        let mut state = self.state.lock().await;
        let Some((first, rest)) = chunks.split_first() else {
            return;
        };
        let result = match *state {
            State::Fresh => {
                let msg = CreateInteractionResponseMessage::new()
                    .content(first)
                    .ephemeral(ephemeral)
                    .allowed_mentions(no_pings());
                http.create_interaction_response(
                    self.id,
                    &self.token,
                    &CreateInteractionResponse::Message(msg),
                    Vec::new(),
                )
                .await
            }
            State::Deferred if !self.component => http
                .edit_original_interaction_response(
                    &self.token,
                    &EditInteractionResponse::new()
                        .content(first)
                        .allowed_mentions(no_pings()),
                    Vec::new(),
                )
                .await
                .map(|_| ()),
            // A deferred press keeps its message; the answer follows it.
            State::Deferred | State::Answered => self.follow_up(http, first, ephemeral).await,
        };
        if let Err(err) = result {
            tracing::warn!(error = %err, "discord interaction answer failed");
        }
        *state = State::Answered;
        for chunk in rest {
            if let Err(err) = self.follow_up(http, chunk, ephemeral).await {
                tracing::warn!(error = %err, "discord follow-up failed");
            }
        }
    }

    async fn follow_up(&self, http: &Http, text: &str, ephemeral: bool) -> serenity::Result<()> {
        let followup = CreateInteractionResponseFollowup::new()
            .content(text)
            .ephemeral(ephemeral)
            .allowed_mentions(no_pings());
        http.create_followup_message(&self.token, &followup, Vec::new())
            .await
            .map(|_| ())
    }

    /// Acknowledges a button press without a message; the pressed message
    /// is edited separately.
    pub async fn acknowledge(&self, http: &Http) {
        let mut state = self.state.lock().await;
        if *state != State::Fresh {
            return;
        }
        if let Err(err) = http
            .create_interaction_response(
                self.id,
                &self.token,
                &CreateInteractionResponse::Acknowledge,
                Vec::new(),
            )
            .await
        {
            tracing::warn!(error = %err, "discord interaction acknowledgement failed");
        }
        *state = State::Answered;
    }

    /// Defers the answer if none was given within [`DEFER_AFTER`]; a
    /// button press defers as an update of its message.
    pub async fn defer_when_late(self: Arc<Self>, http: Arc<Http>) {
        tokio::time::sleep(DEFER_AFTER).await;
        let mut state = self.state.lock().await;
        if *state != State::Fresh {
            return;
        }
        let response = if self.component {
            CreateInteractionResponse::Acknowledge
        } else {
            CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new())
        };
        match http
            .create_interaction_response(self.id, &self.token, &response, Vec::new())
            .await
        {
            Ok(()) => *state = State::Deferred,
            Err(err) => tracing::warn!(error = %err, "discord interaction deferral failed"),
        }
    }
}

/// Slash commands on their way through the session manager, by event id.
#[derive(Debug, Default)]
pub struct Interactions {
    pending: Mutex<HashMap<String, Arc<Pending>>>,
}

impl Interactions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Pending>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes the first reply to `event_id` to `pending`.
    pub fn open(&self, event_id: &str, pending: Arc<Pending>) {
        self.lock().insert(event_id.to_string(), pending);
    }

    /// The interaction waiting for `event_id`'s reply, taken.
    pub fn take(&self, event_id: &str) -> Option<Arc<Pending>> {
        self.lock().remove(event_id)
    }
}
