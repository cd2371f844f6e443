//! `vision_analyze`: ask a vision-capable model about an image, given by
//! URL or as a file in the workspace (where adapters put attachments).

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Value, json};

use crate::config::{Config, Env};
use crate::tools::workspace::{open_data_beneath, resolve};
use crate::tools::{
    Concurrency, Tool, ToolContext, ToolError, ToolSpec, Unavailable, arg_opt_str, arg_str,
};

/// Largest image sent inline.
const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

/// `vision_analyze`.
#[derive(Debug, Clone)]
pub struct VisionAnalyze {
    model: String,
    base_url: String,
    api_key: Option<secrecy::SecretString>,
    key_var: String,
    http: reqwest::Client,
}

impl VisionAnalyze {
    /// The tool as configured by `[tools.vision]` (falling back to `[llm]`).
    pub fn new(config: &Config, env: &Env, http: reqwest::Client) -> Self {
        let vision = &config.tools.vision;
        let key_var = vision
            .api_key_env
            .clone()
            .unwrap_or_else(|| config.llm.api_key_env.clone());
        Self {
            model: vision.model.clone(),
            base_url: vision
                .base_url
                .clone()
                .unwrap_or_else(|| config.llm.base_url.clone()),
            api_key: env.secret(&key_var),
            key_var,
            http,
        }
    }
}

fn mime_for(path: &std::path::Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => "image/jpeg",
    }
}

#[async_trait]
impl Tool for VisionAnalyze {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "vision_analyze",
            "vision",
            "Look at an image and answer a question about it. The image is an http(s) URL or the path of an attachment in the workspace.",
            json!({
                "type": "object",
                "properties": {
                    "image": {"type": "string", "description": "Image URL, or a file path relative to the workspace."},
                    "question": {"type": "string", "description": "What to find out. Default: describe the image."}
                },
                "required": ["image"]
            }),
        )
        .emoji("👁️")
        .concurrency(Concurrency::ReadOnly)
        .requires_env((!self.key_var.is_empty()).then(|| self.key_var.clone()))
    }

    fn check(&self) -> Result<(), Unavailable> {
        if self.model.is_empty() {
            Err("no vision-capable model configured ([tools.vision] model)".into())
        } else if !self.key_var.is_empty() && self.api_key.is_none() {
            Err(Unavailable(format!(
                "environment variable {} is not set",
                self.key_var
            )))
        } else {
            Ok(())
        }
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let image = arg_str(&args, "image")?;
        let question = arg_opt_str(&args, "question").unwrap_or("Describe this image in detail.");
        let image_url = if image.starts_with("http://")
            || image.starts_with("https://")
            || image.starts_with("data:image/")
        {
            image.to_string()
        } else {
            let path = resolve(&ctx.workspace, image)?;
            // Opened beneath the workspace: a directory swapped for a
            // symlink after the check cannot lead out.
            let (root, file, shown) = (ctx.workspace.clone(), path.clone(), image.to_string());
            let bytes = tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let failed = |e: std::io::Error| ToolError::Failed(format!("{shown}: {e}"));
                let opened = open_data_beneath(&root, &file, false).map_err(failed)?;
                // Read no further than the limit, whatever its size said
                // a moment ago (a command may still be writing it).
                let mut bytes = Vec::new();
                opened
                    .take(MAX_IMAGE_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(failed)?;
                if bytes.len() as u64 > MAX_IMAGE_BYTES {
                    return Err(ToolError::Failed(format!(
                        "{shown} is larger than {MAX_IMAGE_BYTES} bytes"
                    )));
                }
                Ok(bytes)
            })
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))??;
            format!(
                "data:{};base64,{}",
                mime_for(&path),
                base64::engine::general_purpose::STANDARD.encode(bytes)
            )
        };
        let body = json!({
            "model": self.model,
            "max_tokens": 1024,
            "messages": [{
                "role": "user",
                "content": [
                    {"type": "text", "text": question},
                    {"type": "image_url", "image_url": {"url": image_url}}
                ]
            }]
        });
        let mut request = self
            .http
            .post(format!(
                "{}/chat/completions",
                self.base_url.trim_end_matches('/')
            ))
            .timeout(Duration::from_secs(120))
            .json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(secrecy::ExposeSecret::expose_secret(key));
        }
        let response = request.send().await.map_err(|e| {
            ToolError::Failed(format!("vision model unreachable: {}", e.without_url()))
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Failed(format!("vision model answered {status}")));
        }
        let reply: Value = response
            .json()
            .await
            .map_err(|e| ToolError::Failed(format!("vision model sent bad JSON: {e}")))?;
        let answer = reply
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::Failed("vision model sent no answer".into()))?;
        Ok(json!({"analysis": answer}).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vision_key_stays_out_of_debug_output() {
        let mut config = Config::default();
        config.tools.vision.api_key_env = Some("VISION_KEY".into());
        let env = Env::from_pairs([("VISION_KEY", "sk-vision-live-secret")]);
        let tool = VisionAnalyze::new(&config, &env, crate::http::client::client());
        assert!(tool.api_key.is_some());
        assert!(!format!("{tool:?}").contains("sk-vision-live-secret"));
    }
}
