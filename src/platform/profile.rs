//! What a platform is, as its adapter describes it from its own config
//! section: who may talk to it, which toolsets its sessions get, whether
//! a person stands behind its sessions, and how their keys are made. The
//! sessions and tools read this instead of knowing platforms by name.

use std::collections::{BTreeMap, BTreeSet};

use super::PlatformId;
use crate::config::{ChatConfig, Progress};

/// One platform's access rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessRules {
    /// User ids always allowed.
    pub allowed_users: Vec<String>,
    /// Chats the bot answers in (empty: any).
    pub allowed_chats: Vec<String>,
    /// Roles whose members are allowed.
    pub allowed_roles: Vec<String>,
    /// In groups, only messages that mention the bot.
    pub require_mention: bool,
    /// With no user or role allowlist, everyone may talk (Slack workspaces,
    /// the terminal, signed webhooks) instead of unknown DM senders having
    /// to pair.
    pub open_when_empty: bool,
}

/// How a platform's session keys are made (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyScheme {
    /// Conversations: `<p>:dm:<chat>[:<thread>]`,
    /// `<p>:group:<chat>[:<thread>][:<user>]`.
    Conversation,
    /// Entities: `<p>:<chat>:<thread>`, the thread naming what the events
    /// are about (a pull request, a pipeline).
    Entity,
}

/// The platform's toolset preset, `gateway-<platform>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// What its sessions are.
    pub description: &'static str,
    /// Its own tools.
    pub tools: &'static [&'static str],
    /// Toolsets it contains (`core` for the chat platforms).
    pub includes: &'static [&'static str],
}

/// A platform's self-description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Its id; also its name on `/readyz`.
    pub id: PlatformId,
    /// Who may reach an agent.
    pub access: AccessRules,
    /// The toolsets its sessions enable (its `toolsets` key, or its preset).
    pub toolsets: Vec<String>,
    /// Chats with toolsets of their own (webhook routes).
    pub chat_toolsets: BTreeMap<String, Vec<String>>,
    /// Its `gateway-<id>` preset.
    pub preset: Preset,
    /// A person stands behind its sessions: notices are shown to them and
    /// approvals asked of them. Webhook runs have none.
    pub human: bool,
    /// How its session keys are made.
    pub keys: KeyScheme,
    /// Chats where sessions without a human ask for approval themselves
    /// (webhook routes that ask on the pull request) instead of in
    /// `[approvals] route_to`.
    pub asks_in: BTreeSet<String>,
    /// Who, beside `approvals.approvers`, may answer an approval asked in
    /// a chat, by chat (a webhook route's `approvers`, who answer by
    /// comment on the pull request); identities as in the configuration.
    pub approvers: BTreeMap<String, Vec<String>>,
    /// Whether answers stream into the chat, and the tool progress shown
    /// meanwhile (off for platforms without a person, or that cannot edit).
    pub live: ChatConfig,
}

/// Nothing streamed, no progress.
pub const STILL: ChatConfig = ChatConfig {
    stream: false,
    progress: Progress::Off,
};

impl Profile {
    /// A chat platform's profile: conversations with people, `gateway-<id>`
    /// unless `toolsets` says otherwise.
    pub fn chat(
        id: &str,
        access: AccessRules,
        toolsets: Option<Vec<String>>,
        preset: Preset,
    ) -> Self {
        Self {
            id: PlatformId::new(id),
            access,
            toolsets: toolsets.unwrap_or_else(|| vec![format!("gateway-{id}")]),
            chat_toolsets: BTreeMap::new(),
            preset,
            human: true,
            keys: KeyScheme::Conversation,
            asks_in: BTreeSet::new(),
            approvers: BTreeMap::new(),
            live: STILL,
        }
    }

    /// This profile, its answers streamed and its progress shown per `live`.
    pub fn streamed(mut self, live: ChatConfig) -> Self {
        self.live = live;
        self
    }

    /// Whether `actor` is one of the approvers of approvals asked in
    /// `chat`.
    pub fn approves_in(&self, chat: &str, actor: &super::Actor) -> bool {
        self.approvers.get(chat).is_some_and(|listed| {
            listed.iter().any(|a| {
                crate::config::identity::names(a, &actor.platform, &actor.user_id, actor.account)
            })
        })
    }

    /// The toolsets a session in `chat` enables.
    pub fn toolsets_for(&self, chat: &str) -> &[String] {
        self.chat_toolsets.get(chat).unwrap_or(&self.toolsets)
    }
}
