//! Hearing audio: an OpenAI-compatible speech-to-text endpoint, as
//! `[transcription]` names it. One request per file —
//! `POST {base_url}/audio/transcriptions`, multipart `file`, `model`,
//! `response_format=json` (and `language` when set) — answered with
//! `{"text": …}`, as OpenAI, Groq, LocalAI, vLLM and the whisper servers
//! do. Overload and server errors are tried again twice.

use std::time::Duration;

use bytes::Bytes;
use secrecy::ExposeSecret;

use crate::config::{Env, TranscriptionConfig};

/// Tries of one transcription when the service is overloaded or failing.
const TRIES: u32 = 3;
/// Characters of an error answer kept in the error.
const ERROR_CHARS: usize = 300;

/// Why audio was not heard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscriptionError {
    /// The service could not be reached, timed out, or failed on its side
    /// (5xx, 429) every time it was tried.
    #[error("the transcription service is unavailable ({0})")]
    Unavailable(String),
    /// The service refused the audio (4xx).
    #[error("the transcription service refused it ({0})")]
    Refused(String),
    /// The answer was not a transcription.
    #[error("the transcription service's answer could not be read ({0})")]
    Unreadable(String),
}

impl TranscriptionError {
    fn retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// A configured transcription endpoint.
pub struct Transcriber {
    http: reqwest::Client,
    url: String,
    model: String,
    language: String,
    key: Option<secrecy::SecretString>,
    timeout: Duration,
    /// Largest file heard, in bytes.
    pub max_bytes: u64,
    /// Longest audio heard, in seconds.
    pub max_seconds: u32,
}

impl std::fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcriber")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Transcriber {
    /// The endpoint `config` names; `None` while `base_url` is empty.
    pub fn from_config(config: &TranscriptionConfig, env: &Env) -> Option<Self> {
        let base = config.base_url.trim();
        if base.is_empty() {
            return None;
        }
        Some(Self {
            http: crate::http::client::client(),
            url: format!("{}/audio/transcriptions", base.trim_end_matches('/')),
            model: config.model.clone(),
            language: config.language.trim().to_string(),
            key: env
                .secret(&config.api_key_env)
                .filter(|k| !k.expose_secret().is_empty()),
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
            max_bytes: config.max_bytes,
            max_seconds: config.max_seconds,
        })
    }

    /// What is said in `audio` (a file called `name`, of type `mime`).
    pub async fn transcribe(
        &self,
        audio: Bytes,
        name: &str,
        mime: Option<&str>,
    ) -> Result<String, TranscriptionError> {
        let mut wait = Duration::from_secs(1);
        let mut tries = 1;
        loop {
            match self.once(audio.clone(), name, mime).await {
                Err(err) if err.retryable() && tries < TRIES => {
                    tracing::debug!(error = %err, tries, "transcription failed; trying again");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    async fn once(
        &self,
        audio: Bytes,
        name: &str,
        mime: Option<&str>,
    ) -> Result<String, TranscriptionError> {
        let unreadable = |e: &dyn std::fmt::Display| TranscriptionError::Unreadable(e.to_string());
        let mut file =
            reqwest::multipart::Part::stream_with_length(audio.clone(), audio.len() as u64)
                .file_name(name.to_string());
        if let Some(mime) = mime {
            file = file.mime_str(mime).map_err(|e| unreadable(&e))?;
        }
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if !self.language.is_empty() {
            form = form.text("language", self.language.clone());
        }
        let mut request = self
            .http
            .post(&self.url)
            .timeout(self.timeout)
            .multipart(form);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request
            .send()
            .await
            .map_err(|e| TranscriptionError::Unavailable(e.without_url().to_string()))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| TranscriptionError::Unavailable(e.without_url().to_string()))?;
        if !status.is_success() {
            let reason = format!("{status}: {}", error_message(&body));
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                TranscriptionError::Unavailable(reason)
            } else {
                TranscriptionError::Refused(reason)
            });
        }
        let answer: serde_json::Value = serde_json::from_str(&body).map_err(|e| unreadable(&e))?;
        answer["text"]
            .as_str()
            .map(|text| text.trim().to_string())
            .ok_or_else(|| unreadable(&"no `text` in it"))
    }
}

/// What an error answer says: OpenAI's `{"error": {"message": …}}`, a
/// server's `{"error": "…"}` or `{"detail": "…"}`, else its start.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let said = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or(v["error"].as_str())
            .or(v["detail"].as_str())
            .or(v["message"].as_str())
            .map(str::to_string)
    });
    crate::render::clip(said.as_deref().unwrap_or(body).trim(), ERROR_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_answers_are_read_in_each_servers_shape() {
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Invalid file format.","type":"invalid_request_error","param":null,"code":null}}"#
            ),
            "Invalid file format."
        );
        assert_eq!(
            error_message(r#"{"error":"failed to read audio"}"#),
            "failed to read audio"
        );
        assert_eq!(error_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(
            error_message("<html>Bad Gateway</html>"),
            "<html>Bad Gateway</html>"
        );
    }

    #[test]
    fn no_base_url_means_no_transcriber() {
        let env = Env::from_pairs([("OPENAI_API_KEY", "k")]);
        assert!(Transcriber::from_config(&TranscriptionConfig::default(), &env).is_none());
        let config = TranscriptionConfig {
            base_url: "http://127.0.0.1:9/v1/".into(),
            ..TranscriptionConfig::default()
        };
        let t = Transcriber::from_config(&config, &env).unwrap();
        assert_eq!(t.url, "http://127.0.0.1:9/v1/audio/transcriptions");
        assert!(t.key.is_some());
    }
}
