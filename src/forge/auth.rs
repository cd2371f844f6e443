//! Who the gateway is on a forge: a token from the environment, or a
//! GitHub App — a JWT signed with the App's private key (RS256, issued a
//! minute in the past, valid nine minutes) traded for an installation
//! token, kept until five minutes before it expires.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

use super::api::Failure;

/// An installation token is renewed this long before it expires.
const RENEW_BEFORE_MS: i64 = 5 * 60 * 1000;
/// Assumed life of a token whose answer names no expiry.
const DEFAULT_LIFE_MS: i64 = 55 * 60 * 1000;

/// How calls authenticate.
#[derive(Clone)]
pub enum Credentials {
    /// A fixed token.
    Token(Arc<str>),
    /// A GitHub App.
    App(Arc<App>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(..)"),
            Self::App(app) => write!(f, "App({})", app.id),
        }
    }
}

/// A GitHub App and the installation tokens it holds.
pub struct App {
    id: u64,
    key: RsaKeyPair,
    installation: Option<u64>,
    tokens: tokio::sync::Mutex<HashMap<u64, (String, i64)>>,
}

/// Why a GitHub App's private key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not PEM.
    #[error("not a PEM key: {0}")]
    NotPem(rustls_pki_types::pem::Error),
    /// PEM, but not an RSA key.
    #[error("not an RSA key")]
    NotRsa,
    /// An RSA key ring refuses.
    #[error("not a usable RSA key: {0}")]
    Unusable(ring::error::KeyRejected),
}

/// Reads a PEM private key: PKCS#1 (`BEGIN RSA PRIVATE KEY`, what GitHub
/// hands out) or PKCS#8.
pub fn read_key(pem: &[u8]) -> Result<RsaKeyPair, KeyError> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(KeyError::NotPem)?;
    match &key {
        PrivateKeyDer::Pkcs1(der) => RsaKeyPair::from_der(der.secret_pkcs1_der()),
        PrivateKeyDer::Pkcs8(der) => RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()),
        _ => return Err(KeyError::NotRsa),
    }
    .map_err(KeyError::Unusable)
}

impl App {
    /// The App `id` signing with `key`; `installation` fixes the
    /// installation instead of taking the event's.
    pub fn new(id: u64, key: RsaKeyPair, installation: Option<u64>) -> Self {
        Self {
            id,
            key,
            installation,
            tokens: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The App's JWT, issued at `now_secs`.
    pub fn jwt(&self, now_secs: i64) -> Result<String, Failure> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = json!({
            "iat": now_secs - 60,
            "exp": now_secs + 9 * 60,
            "iss": self.id.to_string(),
        });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| Failure::fatal("the App's key could not sign"))?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

impl Credentials {
    /// Whether a refused token can be replaced by a new one.
    pub fn renewable(&self) -> bool {
        matches!(self, Self::App(_))
    }

    /// Drops the token held for `installation`.
    pub fn forget(&self, installation: Option<u64>) {
        if let Self::App(app) = self
            && let Some(id) = app.installation.or(installation)
            && let Ok(mut tokens) = app.tokens.try_lock()
        {
            tokens.remove(&id);
        }
    }

    /// The token to send: the fixed one, or the App's token for its
    /// installation (fetched from `base` when none is held or it is about
    /// to expire).
    pub async fn token(
        &self,
        http: &reqwest::Client,
        base: &str,
        installation: Option<u64>,
    ) -> Result<String, Failure> {
        let app = match self {
            Self::Token(token) => return Ok(token.to_string()),
            Self::App(app) => app,
        };
        let id = app.installation.or(installation).ok_or_else(|| {
            Failure::fatal("the event names no App installation and none is configured")
        })?;
        let mut tokens = app.tokens.lock().await;
        let now = crate::store::now_ms();
        if let Some((token, expires)) = tokens.get(&id)
            && now < expires - RENEW_BEFORE_MS
        {
            return Ok(token.clone());
        }
        let jwt = app.jwt(now / 1000)?;
        let resp = http
            .post(format!("{base}/app/installations/{id}/access_tokens"))
            .bearer_auth(jwt)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| Failure::transient(format!("GitHub unreachable: {e}")))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let message = format!(
                "GitHub refused an installation token for installation {id} ({status}): {}",
                body.get("message").and_then(Value::as_str).unwrap_or("")
            );
            return Err(if status.is_server_error() {
                Failure::transient(message)
            } else {
                Failure::fatal(message)
            });
        }
        let token = body
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::fatal("GitHub's installation token answer has no token"))?
            .to_string();
        let expires = body
            .get("expires_at")
            .and_then(Value::as_str)
            .and_then(crate::clock::parse_utc)
            .unwrap_or(now + DEFAULT_LIFE_MS);
        tokens.insert(id, (token.clone(), expires));
        Ok(token)
    }
}
