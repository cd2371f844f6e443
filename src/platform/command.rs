//! The chat commands, parsed in one place: `/help` (`/start`), `/stop`,
//! `/new` (`/reset`), `/status`, `/approve [id] [session|always]` and
//! `/deny [id] [reason]`. `!` works as well as `/` (Slack threads take no
//! slash commands), `@bot` after the word is dropped, and the word is read
//! case-insensitively. Anything else is not a command: unknown words go to
//! the agent as text.

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveScope {
    /// This command, this time.
    Once,
    /// Commands matching the same patterns, for the rest of the session.
    Session,
    /// The patterns join the permanent allowlist.
    Always,
}

/// A command written in a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatCommand {
    /// List the commands.
    Help,
    /// Cancel the running request.
    Stop,
    /// Start a fresh conversation.
    New,
    /// Show the session.
    Status,
    /// Show what the sender and the chat spent, against their budgets.
    Usage,
    /// Approve a waiting command.
    Approve {
        /// The approval named, or the oldest waiting in the chat.
        id: Option<String>,
        /// How far the approval reaches.
        scope: ApproveScope,
    },
    /// Show the session's model and the choices, or switch to one
    /// (`default` goes back to the configured model).
    Model(Option<String>),
    /// Add words to the running request (empty: say how).
    Steer(String),
    /// Deny a waiting command.
    Deny {
        /// The approval named, or the oldest waiting in the chat.
        id: Option<String>,
        /// Why, if given.
        reason: Option<String>,
    },
}

/// An approval id: 32 hexadecimal digits.
fn is_approval_id(word: &str) -> bool {
    word.len() == 32 && word.chars().all(|c| c.is_ascii_hexdigit())
}

impl ChatCommand {
    /// The command `text` is, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let rest = text.strip_prefix('/').or_else(|| text.strip_prefix('!'))?;
        let mut words = rest.split_whitespace();
        let word = words.next()?;
        let word = word.split('@').next().unwrap_or(word).to_ascii_lowercase();
        let mut args: Vec<&str> = words.collect();
        let mut id = || {
            let named = args.first().is_some_and(|w| is_approval_id(w));
            named.then(|| args.remove(0).to_ascii_lowercase())
        };
        Some(match word.as_str() {
            "help" | "start" => Self::Help,
            "stop" => Self::Stop,
            "new" | "reset" => Self::New,
            "status" => Self::Status,
            "usage" => Self::Usage,
            "model" => Self::Model(args.first().map(|m| m.to_string())),
            "steer" => Self::Steer(
                rest.split_once(char::is_whitespace)
                    .map_or("", |(_, words)| words.trim())
                    .to_string(),
            ),
            "approve" => {
                let id = id();
                let scope = match args.first().map(|w| w.to_ascii_lowercase()).as_deref() {
                    Some("session") => ApproveScope::Session,
                    Some("always") => ApproveScope::Always,
                    _ => ApproveScope::Once,
                };
                Self::Approve { id, scope }
            }
            "deny" => {
                let id = id();
                let reason = (!args.is_empty()).then(|| args.join(" "));
                Self::Deny { id, reason }
            }
            _ => return None,
        })
    }

    /// Whether it answers an approval.
    pub fn is_decision(&self) -> bool {
        matches!(self, Self::Approve { .. } | Self::Deny { .. })
    }
}

impl std::fmt::Display for ChatCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Help => f.write_str("/help"),
            Self::Stop => f.write_str("/stop"),
            Self::New => f.write_str("/new"),
            Self::Status => f.write_str("/status"),
            Self::Usage => f.write_str("/usage"),
            Self::Model(None) => f.write_str("/model"),
            Self::Model(Some(name)) => write!(f, "/model {name}"),
            Self::Steer(words) if words.is_empty() => f.write_str("/steer"),
            Self::Steer(words) => write!(f, "/steer {words}"),
            Self::Approve { id, scope } => {
                f.write_str("/approve")?;
                if let Some(id) = id {
                    write!(f, " {id}")?;
                }
                match scope {
                    ApproveScope::Once => Ok(()),
                    ApproveScope::Session => f.write_str(" session"),
                    ApproveScope::Always => f.write_str(" always"),
                }
            }
            Self::Deny { id, reason } => {
                f.write_str("/deny")?;
                if let Some(id) = id {
                    write!(f, " {id}")?;
                }
                if let Some(reason) = reason {
                    write!(f, " {reason}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_words_and_their_forms() {
        assert_eq!(ChatCommand::parse("/stop"), Some(ChatCommand::Stop));
        assert_eq!(
            ChatCommand::parse("  /New@my_bot please"),
            Some(ChatCommand::New)
        );
        assert_eq!(ChatCommand::parse("/reset"), Some(ChatCommand::New));
        assert_eq!(ChatCommand::parse("/start"), Some(ChatCommand::Help));
        assert_eq!(ChatCommand::parse("!STATUS"), Some(ChatCommand::Status));
        assert_eq!(ChatCommand::parse("stop"), None);
        assert_eq!(ChatCommand::parse("/"), None);
        assert_eq!(
            ChatCommand::parse("/model gpt-4.1"),
            Some(ChatCommand::Model(Some("gpt-4.1".into())))
        );
        assert_eq!(ChatCommand::parse("/MODEL"), Some(ChatCommand::Model(None)));
        assert_eq!(ChatCommand::parse("/models"), None);
        assert_eq!(
            ChatCommand::parse("!approve always"),
            Some(ChatCommand::Approve {
                id: None,
                scope: ApproveScope::Always
            })
        );
        assert_eq!(
            ChatCommand::parse(&format!("/approve {} session", ID.to_uppercase())),
            Some(ChatCommand::Approve {
                id: Some(ID.into()),
                scope: ApproveScope::Session
            })
        );
        assert_eq!(
            ChatCommand::parse(&format!("/deny {ID} not on prod")),
            Some(ChatCommand::Deny {
                id: Some(ID.into()),
                reason: Some("not on prod".into())
            })
        );
        assert_eq!(
            ChatCommand::parse("/deny"),
            Some(ChatCommand::Deny {
                id: None,
                reason: None
            })
        );
    }

    fn command() -> impl Strategy<Value = ChatCommand> {
        let id = proptest::option::of("[0-9a-f]{32}");
        let reason = proptest::option::of("[a-z]{1,8}( [a-z]{1,8}){0,3}");
        let scope = prop_oneof![
            Just(ApproveScope::Once),
            Just(ApproveScope::Session),
            Just(ApproveScope::Always)
        ];
        prop_oneof![
            Just(ChatCommand::Help),
            Just(ChatCommand::Stop),
            Just(ChatCommand::New),
            Just(ChatCommand::Status),
            Just(ChatCommand::Usage),
            proptest::option::of("[a-z0-9][a-z0-9./:-]{0,20}").prop_map(ChatCommand::Model),
            (id.clone(), scope).prop_map(|(id, scope)| ChatCommand::Approve { id, scope }),
            (id, reason).prop_map(|(id, reason)| ChatCommand::Deny { id, reason }),
        ]
    }

    proptest! {
        #[test]
        fn written_commands_read_back(cmd in command(), bang in any::<bool>(), pad in "[ \t]{0,3}") {
            let mut text = cmd.to_string();
            if bang {
                text.replace_range(0..1, "!");
            }
            prop_assert_eq!(ChatCommand::parse(&format!("{pad}{text}{pad}")), Some(cmd));
        }

        #[test]
        fn text_that_does_not_start_with_a_prefix_is_never_a_command(text in "[^/!\\s][^\\n]{0,40}") {
            prop_assert_eq!(ChatCommand::parse(&text), None);
        }

        #[test]
        fn any_input_parses_without_panicking(text in "\\PC{0,64}") {
            let _ = ChatCommand::parse(&text);
        }
    }
}
