//! `[webhook.routes.forge]`: a route that reviews pull requests and
//! triages CI on the forge its events come from (GitHub or GitLab, as the
//! route's `scheme` says).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The forge a route reads code from and answers on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForgeConfig {
    /// REST API base URL: `https://api.github.com` (default for GitHub),
    /// `https://ghe.example.com/api/v3` for GitHub Enterprise Server,
    /// `https://gitlab.com/api/v4` (default for GitLab) or a self-managed
    /// GitLab's `/api/v4`.
    pub api_url: Option<String>,
    /// Environment variable holding a token: a GitHub token (fine-grained
    /// or classic) or a GitLab project / group / personal access token.
    pub token_env: Option<String>,
    /// GitHub App id (with `private_key_file`, instead of a token).
    pub app_id: Option<u64>,
    /// The GitHub App's private key (PEM, as GitHub hands it out).
    pub private_key_file: Option<PathBuf>,
    /// The App's installation; by default the one the event names.
    pub installation_id: Option<u64>,
    /// Post findings as inline review comments on the diff (else only the
    /// summary).
    pub inline: bool,
    /// Most inline comments one review posts.
    pub max_inline_comments: usize,
    /// Report each review as a check run `switchboard/review` on GitHub,
    /// a commit status on GitLab, which branch protection can require.
    pub check_run: bool,
    /// The check's conclusion when the review marks a blocking finding:
    /// `neutral` (default, never blocks) or `failure`.
    pub blocking_conclusion: BlockingConclusion,
    /// Logins whose `@<bot> review`, `full review`, `describe`, `pause`, `resume` and
    /// `ask` comments count (the route's `approvers` count as well).
    pub commands_from: Vec<String>,
}

impl Default for ForgeConfig {
    fn default() -> Self {
        Self {
            api_url: None,
            token_env: None,
            app_id: None,
            private_key_file: None,
            installation_id: None,
            inline: true,
            max_inline_comments: 30,
            check_run: true,
            blocking_conclusion: BlockingConclusion::Neutral,
            commands_from: Vec::new(),
        }
    }
}

/// What a blocking finding makes of the review's check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockingConclusion {
    /// The check concludes neutral whatever the review found.
    #[default]
    Neutral,
    /// A blocking finding fails the check (success otherwise).
    Failure,
}
