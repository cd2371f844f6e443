//! Events on a route with a forge, before they run: comment commands
//! (`@<bot> review`, `full review`, `describe`, `pause`, `resume`,
//! `ask …`) from the
//! logins allowed to give them, paused pull requests left alone, and the
//! event's scope stored for its run's forge tools and its answer.

use serde_json::Value;

use crate::config::{SignatureScheme, WebhookRoute};
use crate::forge::host::User;
use crate::forge::{Forge, Scope, Task};
use crate::render::template::{Renderer, lookup_str};

/// A comment command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `review`: what changed since the last review.
    Review,
    /// `full review`.
    FullReview,
    /// `pause`: no automatic reviews on this change.
    Pause,
    /// `resume`.
    Resume,
    /// `describe`: a description of the change.
    Describe,
    /// `ask <question>` (or anything else said to the bot).
    Ask(String),
}

/// The command in `body` addressed to `@bot`, if any.
pub fn command(body: &str, bot: &str) -> Option<Command> {
    let mention = format!("@{}", bot.to_ascii_lowercase());
    let lower = body.to_ascii_lowercase();
    let at = lower.find(&mention)?;
    let rest = body[at + mention.len()..].trim();
    // `@bot` must end there (`@botany` is someone else).
    if body[at + mention.len()..]
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return None;
    }
    let words: Vec<String> = rest
        .split_whitespace()
        .take(2)
        .map(|w| {
            w.trim_end_matches(['.', '!', ',', ':'])
                .to_ascii_lowercase()
        })
        .collect();
    Some(
        match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["full", "review", ..] => Command::FullReview,
            ["review", ..] => Command::Review,
            ["pause", ..] => Command::Pause,
            ["resume", ..] => Command::Resume,
            ["describe", ..] => Command::Describe,
            ["ask", ..] => Command::Ask(rest[3..].trim().to_string()),
            _ => Command::Ask(rest.to_string()),
        },
    )
}

/// What intake makes of an event on a forge route.
#[derive(Debug)]
pub enum Intake {
    /// Run it with this prompt; its scope was stored. A change just
    /// opened comes with the prompt of a second run, its description
    /// (event `<event>:describe`, made when the repository's settings
    /// ask for it).
    Run(String, Option<String>),
    /// Done without a run (a pause, a resume): why.
    Done(&'static str),
    /// Not run: why.
    Skip(&'static str),
}

/// The comment of an `issue_comment` / `note` event and its author.
fn comment(scheme: SignatureScheme, payload: &Value) -> Option<(&str, User)> {
    let (body, author) = match scheme {
        SignatureScheme::Gitlab => (
            lookup_str(payload, "object_attributes.note")?,
            User::read(payload, "user.username", "user.id"),
        ),
        _ => (
            lookup_str(payload, "comment.body")?,
            User::read(payload, "comment.user.login", "comment.user.id"),
        ),
    };
    (!author.login.is_empty()).then_some((body, author))
}

/// Decides what a delivery on forge route `route` does and stores the
/// scope of what runs (under `event_id`, for `entity`).
pub async fn intake(
    forge: &Forge,
    route: &WebhookRoute,
    (event, event_id, entity): (&str, &str, &str),
    prompt: String,
    payload: &Value,
) -> Result<Intake, crate::store::StoreError> {
    let comment_event = matches!(event, "issue_comment" | "note");
    let mut task = None;
    let mut asked = None;
    if comment_event {
        let Some(((body, author), bot)) =
            comment(route.scheme, payload).zip(route.bot_login.as_deref())
        else {
            return Ok(Intake::Skip("no comment or no bot_login"));
        };
        let Some(command) = command(body, bot) else {
            return Ok(Intake::Skip("comment does not address the bot"));
        };
        let login = author.login.as_str();
        if !forge.trusts(&author) {
            crate::telemetry::events::emit(crate::telemetry::events::ForgeCommandIgnored {
                route: &route.name,
                login,
            });
            return Ok(Intake::Skip("commands from this login are not taken"));
        }
        match command {
            Command::Pause | Command::Resume => {
                let paused = command == Command::Pause;
                forge.pause(entity, paused).await?;
                tracing::info!(route = %route.name, entity, login, paused, "automatic reviews switched");
                return Ok(Intake::Done(if paused {
                    "automatic reviews paused on this change"
                } else {
                    "automatic reviews resumed on this change"
                }));
            }
            Command::Review => task = Some(Task::Review),
            Command::FullReview => task = Some(Task::FullReview),
            Command::Describe => task = Some(Task::Describe),
            Command::Ask(question) => {
                task = Some(Task::Ask);
                asked = Some((login.to_string(), question));
            }
        }
    }
    let scope = match route.scheme {
        SignatureScheme::Github => crate::forge::scope::github(event, payload, task),
        SignatureScheme::Gitlab => crate::forge::scope::gitlab(event, payload, task),
        _ => None,
    };
    let Some(mut scope) = scope else {
        return Ok(Intake::Skip("the event names no code to read"));
    };
    if scope.task.reviews() && !comment_event && forge.paused(entity).await? {
        return Ok(Intake::Skip("automatic reviews are paused on this change"));
    }
    let prompt = match (&asked, scope.task) {
        (Some((login, question)), _) => {
            scope.question = Some(question.clone());
            let mut fence = Renderer::new();
            format!(
                "{}\n\n@{login} asks about change #{} in {}:\n{}",
                fence.preamble("forge"),
                scope.change.unwrap_or_default(),
                scope.repo,
                fence.fence_all("question", question)
            )
        }
        (None, task) if comment_event => format!(
            "{} of change #{} in {} was asked for in a comment.",
            match task {
                Task::FullReview => "A full review",
                Task::Describe => "A description",
                _ => "A review",
            },
            scope.change.unwrap_or_default(),
            scope.repo
        ),
        (None, _) => prompt,
    };
    let prompt = format!(
        "{prompt}\n\n{}",
        crate::forge::publish::instructions(scope.task)
    );
    let describe = if opened(route.scheme, event, payload) {
        let described = Scope {
            task: Task::Describe,
            ..scope.clone()
        };
        forge
            .keep_scope(&describe_id(event_id), entity, &described)
            .await?;
        Some(format!(
            "Change #{} in {} was just opened; describe it.\n\n{}",
            scope.change.unwrap_or_default(),
            scope.repo,
            crate::forge::publish::instructions(Task::Describe)
        ))
    } else {
        None
    };
    forge.keep_scope(event_id, entity, &scope).await?;
    Ok(Intake::Run(prompt, describe))
}

/// The event of the description of a change opened by event `event_id`.
pub fn describe_id(event_id: &str) -> String {
    format!("{event_id}:describe")
}

/// Whether `event` opened a change.
fn opened(scheme: SignatureScheme, event: &str, payload: &Value) -> bool {
    match (scheme, event) {
        (SignatureScheme::Github, "pull_request") => {
            lookup_str(payload, "action") == Some("opened")
        }
        (SignatureScheme::Gitlab, "merge_request") => {
            lookup_str(payload, "object_attributes.action") == Some("open")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_follow_the_mention() {
        assert_eq!(
            command("@SB-bot review please", "sb-bot"),
            Some(Command::Review)
        );
        assert_eq!(
            command("hey @sb-bot full review.", "sb-bot"),
            Some(Command::FullReview)
        );
        assert_eq!(command("@sb-bot pause", "sb-bot"), Some(Command::Pause));
        assert_eq!(
            command("@sb-bot ask why is this safe?", "sb-bot"),
            Some(Command::Ask("why is this safe?".into()))
        );
        assert_eq!(
            command("@sb-bot what does this do", "sb-bot"),
            Some(Command::Ask("what does this do".into()))
        );
        assert_eq!(command("@sb-botany review", "sb-bot"), None);
        assert_eq!(command("review please", "sb-bot"), None);
    }
}
