//! The console platform: a person at a terminal (`switchboard chat`).
//! Answers go to stdout, notices and tool activity to stderr; approval
//! prompts and questions are asked on stderr and answered on stdin, the
//! answer handed back as a button press or a message like any chat's.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::Mutex;

use crate::config::Config;
use crate::platform::{
    AccessRules, Activity, Actor, Capabilities, ChatKind, ChatRef, InboundEvent, Platform,
    PlatformError, Preset, Profile, Prompt, PromptKind,
};
use crate::sessions::{Press, SessionManager};

/// The console's platform id.
pub const ID: &str = "cli";

/// The terminal's profile: whoever runs the command may talk, with the
/// core tools.
pub fn profile(config: &Config) -> Profile {
    let _ = config;
    Profile::chat(
        ID,
        AccessRules {
            open_when_empty: true,
            ..AccessRules::default()
        },
        None,
        Preset {
            description: "Local terminal sessions",
            tools: &[],
            includes: &["core"],
        },
    )
}

/// Lines of standard input, shared by the prompt loop and the prompts
/// asked during a turn.
#[derive(Clone)]
pub struct ConsoleInput(Arc<Mutex<Lines<BufReader<Stdin>>>>);

impl Default for ConsoleInput {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(
            BufReader::new(tokio::io::stdin()).lines(),
        )))
    }
}

impl ConsoleInput {
    /// The next line, `None` at end of input.
    pub async fn line(&self) -> Option<String> {
        self.0.lock().await.next_line().await.ok().flatten()
    }
}

impl std::fmt::Debug for ConsoleInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsoleInput")
    }
}

/// The person at the terminal, as a platform.
#[derive(Debug, Clone)]
pub struct Console {
    input: ConsoleInput,
    interactive: bool,
    sessions: SessionManager,
}

impl Console {
    /// Prompts answered from `input` (refused when not `interactive`, as
    /// in a one-shot run), the answers handed to `sessions`.
    pub fn new(input: ConsoleInput, interactive: bool, sessions: SessionManager) -> Self {
        Self {
            input,
            interactive,
            sessions,
        }
    }

    /// The message `user` typed, as an inbound event.
    pub fn event(user: &str, text: &str) -> InboundEvent {
        InboundEvent {
            platform: ID.into(),
            kind: ChatKind::Dm,
            chat_id: user.into(),
            thread_id: None,
            user_id: user.into(),
            user_name: user.into(),
            roles: Vec::new(),
            text: text.into(),
            event_id: crate::store::new_id(),
            message_id: None,
            mentioned: true,
            from_bot: false,
            in_thread: false,
            attachments: Vec::new(),
            revision: crate::platform::Revision::New,
        }
    }

    async fn ask_line(&self, prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        self.input.line().await
    }

    async fn press(&self, at: &ChatRef, data: &str) {
        let press = Press {
            chat: at.clone(),
            actor: Actor {
                platform: ID.into(),
                user_id: at.chat.clone(),
                name: at.chat.clone(),
                account: None,
            },
            data: data.to_string(),
        };
        if let Err(why) = self.sessions.press(&press).await {
            tell(format_args!("{why}"));
        }
    }
}

/// Writes `line` and a newline to stderr in one write: stderr is not
/// buffered, so `eprintln!` makes a write of each piece of its format.
fn tell(line: std::fmt::Arguments<'_>) {
    let mut line = line.to_string();
    line.push('\n');
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Markdown as terminal text: emphasis marks dropped, code blocks indented.
fn plain(markdown: &str) -> String {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push(format!("    {line}"));
        } else {
            out.push(line.replace("**", ""));
        }
    }
    out.join("\n")
}

#[async_trait::async_trait]
impl Platform for Console {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: usize::MAX,
            buttons: false,
            edits: false,
            threads: false,
            downloads: false,
        }
    }

    async fn send(
        &self,
        _to: &ChatRef,
        _reply_to: Option<&str>,
        text: &str,
    ) -> Result<String, PlatformError> {
        println!("{text}");
        Ok(String::new())
    }

    async fn ask(&self, at: &ChatRef, prompt: &Prompt) -> Result<String, PlatformError> {
        if !self.interactive {
            return Err(PlatformError::Rejected(
                "no one is at the terminal to answer in a one-shot run".into(),
            ));
        }
        let mut text = format!("\n{}\n", plain(&prompt.text));
        match prompt.kind {
            PromptKind::Approval => {
                text.push_str("Allow? [y] once / [s] for this session / [a] always / [N] no: ");
                let answer = self.ask_line(&text).await.unwrap_or_default();
                let pick = match answer.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => 0,
                    "s" | "session" => 1,
                    "a" | "always" => 2,
                    _ => 3,
                };
                if let Some(choice) = prompt.choices.get(pick).or(prompt.choices.last()) {
                    self.press(at, &choice.data).await;
                }
            }
            PromptKind::Question => {
                for (i, choice) in prompt.choices.iter().enumerate() {
                    text.push_str(&format!("   {}. {}\n", i + 1, choice.label));
                }
                text.push_str("> ");
                let answer = self.ask_line(&text).await.unwrap_or_default();
                let answer = answer.trim();
                let picked = answer
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| prompt.choices.get(n.wrapping_sub(1)));
                match picked {
                    Some(choice) => self.press(at, &choice.data).await,
                    None => {
                        let event = Console::event(&at.chat, answer);
                        if let Err(err) = self.sessions.submit(event).await {
                            tell(format_args!("error: {err}"));
                        }
                    }
                }
            }
        }
        Ok(prompt.id.clone())
    }

    async fn edit(
        &self,
        _at: &ChatRef,
        _message: &str,
        outcome: &str,
    ) -> Result<(), PlatformError> {
        tell(format_args!("{}", plain(outcome)));
        Ok(())
    }

    fn activity(&self, _at: &ChatRef, activity: &Activity) {
        match activity {
            Activity::ToolStarted {
                name,
                emoji,
                arguments,
            } => tell(format_args!("  {emoji} {name} {arguments}")),
            Activity::ToolFinished { name, ok, chars } => {
                let mark = if *ok { "✓" } else { "✗" };
                tell(format_args!("  {mark} {name} ({chars} chars)"));
            }
        }
    }
}

/// Whether standard input is a terminal.
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}
