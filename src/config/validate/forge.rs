//! The checks of `[webhook.routes.forge]`: a scheme with a forge,
//! credentials that can be read, commands with a bot to address.

use super::Validator;
use crate::config::{ForgeConfig, SignatureScheme, WebhookRoute};

impl Validator<'_> {
    pub(super) fn forge(
        &mut self,
        key: &dyn Fn(&str) -> String,
        route: &WebhookRoute,
        forge: &ForgeConfig,
        enabled: bool,
    ) {
        match route.scheme {
            SignatureScheme::Github => {}
            SignatureScheme::Gitlab if forge.app_id.is_none() => {}
            SignatureScheme::Gitlab => self.push(
                key("forge.app_id"),
                "GitHub Apps are GitHub's; a GitLab route uses token_env",
            ),
            _ => self.push(
                key("forge"),
                "forge reviews need scheme = \"github\" or \"gitlab\"",
            ),
        }
        if let Some(url) = &forge.api_url {
            self.url(&key("forge.api_url"), url);
        }
        if forge.max_inline_comments == 0 || forge.max_inline_comments > 100 {
            self.push(key("forge.max_inline_comments"), "must be 1 to 100");
        }
        if !forge.commands_from.is_empty() && route.bot_login.is_none() {
            self.push(
                key("bot_login"),
                "forge.commands_from needs the bot's login (commands are `@<bot_login> review`, …)",
            );
        }
        match (forge.app_id, &forge.private_key_file) {
            (Some(_), Some(file)) => {
                if let Err(err) = std::fs::read(file)
                    .map_err(|e| e.to_string())
                    .and_then(|pem| {
                        crate::forge::auth::read_key(&pem)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    })
                {
                    self.push(
                        key("forge.private_key_file"),
                        format!("{}: {err}", file.display()),
                    );
                }
            }
            (Some(_), None) => self.push(
                key("forge.private_key_file"),
                "a GitHub App (forge.app_id) needs its private key",
            ),
            (None, Some(_)) => self.push(
                key("forge.app_id"),
                "forge.private_key_file needs the App's id",
            ),
            (None, None) if enabled => {
                let default = match route.scheme {
                    SignatureScheme::Gitlab => "GITLAB_TOKEN",
                    _ => "GITHUB_TOKEN",
                };
                let var = forge.token_env.as_deref().unwrap_or(default);
                self.secret(&key("forge.token_env"), var, "the route has a forge");
            }
            (None, None) => {}
        }
    }
}
