//! The one way an outbound HTTP client is made (model providers, tools,
//! webhook delivery, MCP over HTTP, the CLI): the same user agent
//! everywhere, and the process's one TLS policy.
//!
//! The policy, for every outbound TLS connection the gateway makes — these
//! clients, the Slack connector, the Telegram and Discord clients, and
//! PostgreSQL: certificates are verified against the Mozilla root set
//! compiled into the binary (`webpki-roots`), and `ring` is the one crypto
//! provider. The system's trust store is never consulted, so an image
//! without `ca-certificates` behaves exactly like a host.

use std::sync::{Arc, LazyLock};

/// The user agent of every request the gateway makes.
pub const USER_AGENT: &str = concat!("switchboard/", env!("CARGO_PKG_VERSION"));

/// Makes `ring` the process-wide rustls provider. Called first thing at
/// start and by every builder here, so a library that asks rustls for the
/// default (reqwest, rmcp) finds it; calling it again is harmless.
pub fn install_crypto() {
    // Err means a provider is already installed: ring, by an earlier call.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The gateway's TLS client configuration: bundled roots, ring, TLS 1.2
/// and 1.3, no ALPN: the gateway speaks HTTP/1.1.
pub fn tls_config() -> rustls::ClientConfig {
    static CONFIG: LazyLock<rustls::ClientConfig> = LazyLock::new(|| {
        install_crypto();
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|_| unreachable!("ring supports the default protocol versions"))
        .with_root_certificates(roots)
        .with_no_client_auth()
    });
    CONFIG.clone()
}

/// A builder with the gateway's defaults, for callers that add their own
/// settings (a timeout, a pinned address).
pub fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .tls_backend_preconfigured(tls_config())
}

/// A client with the gateway's defaults; share it (it pools connections).
pub fn client() -> reqwest::Client {
    builder()
        .build()
        .unwrap_or_else(|e| unreachable!("the default client always builds: {e}"))
}

/// A client that follows no redirect, for requests that carry credentials
/// (forge tokens): a redirect to another host would take them along
/// (reqwest drops `Authorization` across hosts, but not GitLab's
/// `private-token`). One per process; share it.
pub fn credentialed() -> reqwest::Client {
    static CLIENT: LazyLock<reqwest::Client> = LazyLock::new(|| {
        builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_else(|e| unreachable!("the default client always builds: {e}"))
    });
    CLIENT.clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_agent_names_the_version() {
        assert!(super::USER_AGENT.starts_with("switchboard/"));
        assert!(super::USER_AGENT.len() > "switchboard/".len());
    }

    #[test]
    fn the_policy_trusts_the_bundled_roots_only() {
        let config = super::tls_config();
        assert!(config.alpn_protocols.is_empty());
        assert_eq!(
            config.crypto_provider().cipher_suites.len(),
            rustls::crypto::ring::default_provider().cipher_suites.len()
        );
        super::client();
    }
}
