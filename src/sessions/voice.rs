//! Voice notes and audio files, heard before their turn. The worker (not
//! the intake: a platform's acknowledgement must not wait on a model, and
//! a redelivery is dropped by the inbox first) fetches each through the
//! platform's port, sends it to `[transcription]`, and makes the message
//! what was said. What was heard and the quote that shows it in the chat
//! are stored with the event in one transaction, so a replay after a crash
//! neither hears it again nor shows it twice. What cannot be heard (no
//! transcription configured, too long, too large, the service failing) is
//! said in the chat; a note with nothing else in it is not answered.

use std::sync::Arc;

use super::manager::Inner;
use crate::platform::{Attachment, AttachmentKind, InboundEvent};

/// Characters of a transcript quoted back in the chat.
const QUOTE_CHARS: usize = 400;

/// What hearing an event's audio left.
pub(super) enum Heard {
    /// The event has no audio: it goes on as it is.
    Nothing,
    /// Its audio is in its text now: its turn runs.
    Message,
    /// Nothing in it can be answered: it ends with this notice.
    Unanswerable(String),
}

/// Whether `event` carries audio to hear.
pub(super) fn audible(event: &InboundEvent) -> bool {
    event
        .attachments
        .iter()
        .any(|a| a.kind == AttachmentKind::Audio)
}

/// Hears the audio of inbox event `inbox_id` (session `key`) into its text.
pub(super) async fn hear(
    inner: &Arc<Inner>,
    key: &str,
    inbox_id: i64,
    event: &mut InboundEvent,
) -> Heard {
    let (audio, rest): (Vec<Attachment>, Vec<Attachment>) = std::mem::take(&mut event.attachments)
        .into_iter()
        .partition(|a| a.kind == AttachmentKind::Audio);
    event.attachments = rest;
    if audio.is_empty() {
        return Heard::Nothing;
    }
    // Hearing takes a while: the chat shows the bot at work meanwhile.
    inner.replies.working(event, true).await;
    let mut heard = Vec::new();
    let mut unheard = Vec::new();
    for clip in &audio {
        match listen(inner, key, &event.platform, clip).await {
            Ok(text) => heard.push(text),
            Err(reason) => {
                tracing::info!(session.key = %key, inbox.id = inbox_id, reason, "voice note not heard");
                unheard.push(reason);
            }
        }
    }
    let caption = event.text.trim().to_string();
    let mut said = Vec::new();
    if !caption.is_empty() {
        said.push(caption);
    }
    let alone = said.is_empty() && heard.len() == 1 && unheard.is_empty();
    for text in &heard {
        said.push(if alone {
            text.clone()
        } else {
            format!("[Voice note, transcribed:] {text}")
        });
    }
    let mut shown: Vec<String> = heard.iter().map(|text| quote(text)).collect();
    for reason in &unheard {
        shown.push(format!("I couldn't listen to your voice note: {reason}."));
    }
    let shown = shown.join("\n\n");
    if said.is_empty() {
        inner.replies.working(event, false).await;
        return Heard::Unanswerable(shown);
    }
    for reason in &unheard {
        said.push(format!(
            "[The user also sent a voice note that could not be transcribed: {reason}.]"
        ));
    }
    event.text = said.join("\n\n");
    let payload = serde_json::to_string(&event).unwrap_or_default();
    let out = super::completion::outbound(event, &shown);
    match inner.store.inbox_heard(inbox_id, key, &payload, &out).await {
        Ok(Some(row)) => {
            super::outbox::send(inner, row, &out).await;
        }
        Ok(None) => {}
        Err(err) => {
            // The turn still runs on what was heard; a replay would hear
            // it again.
            tracing::warn!(inbox.id = inbox_id, error = %err, "what was heard could not be stored");
            inner.replies.notice(event, &shown).await;
        }
    }
    Heard::Message
}

/// What `clip` says, or why it was not heard: a clause for the user,
/// which is all the error is ever used as, so it stays text.
async fn listen(
    inner: &Inner,
    key: &str,
    platform: &str,
    clip: &Attachment,
) -> Result<String, String> {
    let Some(transcriber) = &inner.transcriber else {
        return Err("voice messages can't be transcribed here (no transcription service is set up), so please type it".into());
    };
    if let Some(secs) = clip.duration_secs
        && secs > transcriber.max_seconds
    {
        return Err(format!(
            "it is {} long and the limit is {}",
            minutes(secs),
            minutes(transcriber.max_seconds)
        ));
    }
    let too_large = |bytes: u64| {
        format!(
            "it is {} and the limit is {}",
            megabytes(bytes),
            megabytes(transcriber.max_bytes)
        )
    };
    if let Some(size) = clip.size
        && size > transcriber.max_bytes
    {
        return Err(too_large(size));
    }
    let port = inner
        .platforms()
        .port(platform)
        .ok_or("the platform is not connected")?;
    // The daemon's staging directory, where no command reaches: the clip
    // is heard and removed, never put in the workspace.
    let dir = crate::tools::workspace::session_dir(&inner.config.agent.workspace, key)
        .and_then(|workspace| crate::tools::workspace::staging_dir(&workspace))
        .map_err(|e| format!("it could not be saved ({e})"))?;
    let path = crate::platform::retrying(|| port.fetch(clip, &dir))
        .await
        .map_err(|e| format!("it could not be downloaded ({e})"))?;
    let audio = tokio::fs::read(&path).await;
    // The transcript is what the agent gets; the file is not kept.
    let _ = tokio::fs::remove_file(&path).await;
    let audio = audio.map_err(|e| format!("it could not be read ({e})"))?;
    if audio.len() as u64 > transcriber.max_bytes {
        return Err(too_large(audio.len() as u64));
    }
    let text = transcriber
        .transcribe(audio.into(), &clip.name, clip.mime.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    if text.is_empty() {
        return Err("no speech was heard in it".into());
    }
    Ok(text)
}

/// `text` as a short quote on one line: "🎤 …", cut at a word near
/// [`QUOTE_CHARS`].
fn quote(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let short = match line.char_indices().nth(QUOTE_CHARS) {
        None => line,
        Some((cut, _)) => {
            let head = &line[..cut];
            let head = head.rsplit_once(' ').map_or(head, |(words, _)| words);
            format!("{head}…")
        }
    };
    format!("> 🎤 {short}")
}

fn minutes(secs: u32) -> String {
    format!("{}:{:02}", secs / 60, secs % 60)
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_transcript_is_quoted_short_on_one_line() {
        let long = "word ".repeat(200);
        let q = quote(&format!("first line\nsecond {long}"));
        assert!(q.starts_with("> 🎤 first line second word"), "{q}");
        assert!(
            q.chars().count() <= QUOTE_CHARS + 5,
            "{}",
            q.chars().count()
        );
        assert!(!q.contains('\n'));
    }

    #[test]
    fn limits_read_as_people_say_them() {
        assert_eq!(minutes(605), "10:05");
        assert_eq!(megabytes(20 * 1024 * 1024), "20.0 MB");
    }
}
