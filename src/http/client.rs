//! The one way an outbound HTTP client is made (model providers, tools,
//! webhook delivery, the CLI): the same user agent everywhere, and the
//! place where the process's TLS policy is applied.

/// The user agent of every request the gateway makes.
pub const USER_AGENT: &str = concat!("switchboard/", env!("CARGO_PKG_VERSION"));

/// A builder with the gateway's defaults, for callers that add their own
/// settings (a timeout, a pinned address).
pub fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().user_agent(USER_AGENT)
}

/// A client with the gateway's defaults; share it (it pools connections).
pub fn client() -> reqwest::Client {
    builder().build().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_agent_names_the_version() {
        assert!(super::USER_AGENT.starts_with("switchboard/"));
        assert!(super::USER_AGENT.len() > "switchboard/".len());
    }
}
