//! `web_search` (SearXNG, Brave or Tavily) and `web_extract` (a page as
//! readable text, behind an SSRF guard: loopback, private, link-local and
//! cloud-metadata addresses are refused after DNS resolution, on every
//! redirect hop, and the connection is pinned to the checked address).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::config::Env;
use crate::config::{SearchProvider, WebExtractConfig, WebSearchConfig};
use crate::tools::{
    Concurrency, Tool, ToolContext, ToolError, ToolSpec, Unavailable, arg_opt_u64, arg_str,
};

/// Whether an address must never be fetched on a model's behalf.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_forbidden(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            let first = seg[0];
            // Forms that carry an IPv4 address, which a host or gateway may
            // route to it: ::/96 (IPv4-compatible, `[::127.0.0.1]`, and
            // with it :: and ::1), ::ffff:0:a.b.c.d (IPv4-translated),
            // 64:ff9b::/32 (NAT64, well-known and local-use), 2002::/16
            // (6to4) and 2001::/32 (Teredo).
            seg[..6] == [0; 6]
                || seg[..6] == [0, 0, 0, 0, 0xffff, 0]
                || (first == 0x64 && seg[1] == 0xff9b)
                || first == 0x2002
                || (first == 0x2001 && seg[1] == 0)
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                || (first == 0x100 && seg[1..4] == [0; 3])
                || (first == 0x2001 && seg[1] == 0xdb8)
        }
    }
}

fn refused(msg: String) -> ToolError {
    ToolError::Refused(msg)
}

/// `web_extract`.
#[derive(Debug, Clone)]
pub struct WebExtract {
    config: WebExtractConfig,
}

impl WebExtract {
    /// The tool with its limits and allowlist.
    pub fn new(config: WebExtractConfig) -> Self {
        Self { config }
    }

    fn allowed_host(&self, host: &str) -> bool {
        self.config
            .allow_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host.trim_matches(['[', ']'])))
    }

    /// The address to connect to for `url`, after the guard.
    async fn checked_addr(&self, url: &url::Url) -> Result<SocketAddr, ToolError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused(format!(
                "only http and https URLs can be fetched, not {}",
                url.scheme()
            )));
        }
        let host = url
            .host_str()
            .ok_or_else(|| refused("URL has no host".into()))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let bare = host.trim_matches(['[', ']']);
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|e| ToolError::Failed(format!("cannot resolve {host}: {e}")))?
                .collect(),
        };
        let first = *addrs
            .first()
            .ok_or_else(|| ToolError::Failed(format!("{host} has no address")))?;
        if !self.allowed_host(bare)
            && let Some(bad) = addrs.iter().find(|a| is_forbidden(a.ip()))
        {
            return Err(refused(format!(
                "{host} resolves to {}, a private, loopback or link-local address; fetching it is not allowed",
                bad.ip()
            )));
        }
        Ok(first)
    }

    async fn fetch(&self, start: &str) -> Result<(String, String, String), ToolError> {
        let mut url = url::Url::parse(start)
            .map_err(|e| ToolError::InvalidArgs(format!("bad URL {start:?}: {e}")))?;
        for _ in 0..=self.config.max_redirects {
            let addr = self.checked_addr(&url).await?;
            // No proxy from the environment: a proxy would resolve the
            // host itself, past the guard and the pinned address.
            let mut builder = crate::http::client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(self.config.timeout_secs));
            if let Some(host) = url.host_str().filter(|h| h.parse::<IpAddr>().is_err()) {
                builder = builder.resolve(host, addr);
            }
            let client = builder
                .build()
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            let response = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| ToolError::Failed(format!("fetch failed: {e}")))?;
            if response.status().is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| ToolError::Failed("redirect without a Location".into()))?;
                url = url
                    .join(location)
                    .map_err(|e| ToolError::Failed(format!("bad redirect: {e}")))?;
                continue;
            }
            if !response.status().is_success() {
                return Err(ToolError::Failed(format!(
                    "{url} answered {}",
                    response.status()
                )));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("text/html")
                .to_ascii_lowercase();
            let body = read_capped(response, self.config.max_body_bytes).await?;
            return Ok((url.to_string(), content_type, body));
        }
        Err(ToolError::Failed(format!(
            "more than {} redirects",
            self.config.max_redirects
        )))
    }
}

async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<String, ToolError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ToolError::Failed(format!("reading the body failed: {e}")))?
    {
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= cap {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn html_title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = start + lower[start..].find('>')? + 1;
    let close = open_end + lower[open_end..].find("</title>")?;
    let title = html[open_end..close]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!title.is_empty()).then_some(title)
}

#[async_trait]
impl Tool for WebExtract {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "web_extract",
            "web",
            "Fetch a web page and return its readable text (HTML converted to markdown-like text). Private and local network addresses cannot be fetched.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http(s) URL of the page."}
                },
                "required": ["url"]
            }),
        )
        .emoji("🌐")
        .concurrency(Concurrency::ReadOnly)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let (final_url, content_type, body) = self.fetch(arg_str(&args, "url")?).await?;
        let (title, content) = if content_type.contains("html") {
            let text = html2text::from_read(body.as_bytes(), 100)
                .map_err(|e| ToolError::Failed(format!("cannot read the HTML: {e}")))?;
            (html_title(&body), text)
        } else if content_type.starts_with("text/")
            || content_type.contains("json")
            || content_type.contains("xml")
        {
            (None, body)
        } else {
            return Err(ToolError::Failed(format!(
                "unsupported content type {content_type}"
            )));
        };
        Ok(json!({"url": final_url, "title": title, "content": content}).to_string())
    }
}

/// `web_search`.
#[derive(Debug, Clone)]
pub struct WebSearch {
    config: WebSearchConfig,
    api_key: Option<secrecy::SecretString>,
    http: reqwest::Client,
}

impl WebSearch {
    /// The tool for a configured backend; the key is read from `env`.
    pub fn new(config: WebSearchConfig, env: &Env, http: reqwest::Client) -> Self {
        let api_key = env.secret(&config.api_key_env);
        Self {
            config,
            api_key,
            http,
        }
    }

    fn endpoint(&self) -> String {
        let default = match self.config.provider {
            SearchProvider::Brave => "https://api.search.brave.com/res/v1/web/search",
            SearchProvider::Tavily => "https://api.tavily.com/search",
            SearchProvider::Searxng | SearchProvider::None => "",
        };
        match self.config.provider {
            SearchProvider::Searxng => format!("{}/search", self.config.url.trim_end_matches('/')),
            _ if !self.config.url.is_empty() => self.config.url.clone(),
            _ => default.to_string(),
        }
    }
}

fn pick(results: Option<&Value>, text_field: &str, max: usize) -> Vec<Value> {
    results
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(max)
        .map(|r| {
            json!({
                "title": r.get("title").and_then(Value::as_str).unwrap_or_default(),
                "url": r.get("url").and_then(Value::as_str).unwrap_or_default(),
                "snippet": r.get(text_field).and_then(Value::as_str).unwrap_or_default(),
            })
        })
        .collect()
}

#[async_trait]
impl Tool for WebSearch {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "web_search",
            "web",
            "Search the web. Returns titles, URLs and snippets; use web_extract to read a result.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many results (default 8)."}
                },
                "required": ["query"]
            }),
        )
        .emoji("🔍")
        .concurrency(Concurrency::ReadOnly)
        .requires_env(
            matches!(
                self.config.provider,
                SearchProvider::Brave | SearchProvider::Tavily
            )
            .then(|| self.config.api_key_env.clone()),
        )
    }

    fn check(&self) -> Result<(), Unavailable> {
        match self.config.provider {
            SearchProvider::None => {
                Err("no search backend configured ([tools.web_search] provider)".into())
            }
            SearchProvider::Searxng if self.config.url.is_empty() => {
                Err("tools.web_search.url must name the SearXNG instance".into())
            }
            SearchProvider::Brave | SearchProvider::Tavily if self.api_key.is_none() => {
                Err(Unavailable(format!(
                    "environment variable {} (tools.web_search.api_key_env) is not set",
                    self.config.api_key_env
                )))
            }
            _ => Ok(()),
        }
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let query = arg_str(&args, "query")?;
        let max = arg_opt_u64(&args, "max_results")?
            .map_or(self.config.max_results, |n| n as usize)
            .clamp(1, 20);
        let key = self
            .api_key
            .as_ref()
            .map(|k| secrecy::ExposeSecret::expose_secret(k).clone())
            .unwrap_or_default();
        let request = match self.config.provider {
            SearchProvider::Searxng => self
                .http
                .get(self.endpoint())
                .query(&[("q", query), ("format", "json")]),
            SearchProvider::Brave => self
                .http
                .get(self.endpoint())
                .query(&[("q", query), ("count", &max.to_string())])
                .header("Accept", "application/json")
                .header("X-Subscription-Token", key),
            SearchProvider::Tavily => self
                .http
                .post(self.endpoint())
                .bearer_auth(key)
                .json(&json!({"query": query, "max_results": max})),
            SearchProvider::None => return Err(ToolError::Failed("no search backend".into())),
        };
        let response = request
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .map_err(|e| {
                ToolError::Failed(format!("search request failed: {}", e.without_url()))
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Failed(format!(
                "search backend answered {status}"
            )));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| ToolError::Failed(format!("search backend sent bad JSON: {e}")))?;
        let results = match self.config.provider {
            SearchProvider::Brave => pick(body.pointer("/web/results"), "description", max),
            _ => pick(body.get("results"), "content", max),
        };
        Ok(json!({"query": query, "results": results}).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_key_stays_out_of_debug_output() {
        let config = WebSearchConfig {
            provider: SearchProvider::Brave,
            api_key_env: "BRAVE_KEY".into(),
            ..WebSearchConfig::default()
        };
        let env = Env::from_pairs([("BRAVE_KEY", "brave-live-secret")]);
        let tool = WebSearch::new(config, &env, crate::http::client::client());
        assert!(tool.api_key.is_some());
        assert!(!format!("{tool:?}").contains("brave-live-secret"));
    }

    #[test]
    fn forbidden_addresses() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "224.0.0.1",
            "::127.0.0.1",
            "::",
            "::a00:1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::",
            "2001:0:4136:e378::1",
            "100::1",
            "fec0::1",
        ] {
            assert!(is_forbidden(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(!is_forbidden(ok.parse().unwrap()), "{ok}");
        }
    }

    #[test]
    fn titles_are_found() {
        assert_eq!(
            html_title("<html><TITLE> Hello\n world </TITLE>").as_deref(),
            Some("Hello world")
        );
        assert_eq!(html_title("<p>none</p>"), None);
    }
}
