//! Platform adapters: each translates its platform's traffic into
//! [`InboundEvent`](crate::platform::InboundEvent)s and button presses for
//! the sessions, implements the [`Platform`](crate::platform::Platform)
//! port for what goes back, and describes itself with a
//! [`Profile`](crate::platform::Profile) from its own config section. Each
//! platform lives in its own feature-gated folder; what they are given and
//! give back is in `context.rs`, the life they share in `lifecycle.rs`.

pub mod console;
mod context;
#[cfg(feature = "discord")]
pub mod discord;
pub mod lifecycle;
pub mod signing;
#[cfg(feature = "slack")]
pub mod slack;
#[cfg(feature = "telegram")]
pub mod telegram;
#[cfg(feature = "webhook")]
pub mod webhook;

use std::sync::Arc;

pub use context::{BoxFuture, ComponentContext, ComponentFn, Gateway, RoutesFn, Wiring};

use crate::config::{Config, Problem};
use crate::platform::{Platforms, Profile};

/// The profiles of the compiled-in platforms, the terminal's included.
pub fn profiles(config: &Config) -> Vec<Profile> {
    #[cfg_attr(
        not(any(
            feature = "telegram",
            feature = "discord",
            feature = "slack",
            feature = "webhook"
        )),
        allow(unused_mut)
    )]
    let mut all = vec![console::profile(config)];
    #[cfg(feature = "telegram")]
    all.push(telegram::profile(config));
    #[cfg(feature = "discord")]
    all.push(discord::profile(config));
    #[cfg(feature = "slack")]
    all.push(slack::profile(config));
    #[cfg(feature = "webhook")]
    all.push(webhook::profile(config));
    all
}

/// A registry that knows every compiled-in platform, none connected.
pub fn platforms(config: &Config) -> Arc<Platforms> {
    Arc::new(Platforms::new(profiles(config)))
}

/// Toolset names in the configuration that name nothing: not a built-in
/// toolset, a platform's preset, or an MCP server's.
pub fn check_toolsets(config: &Config) -> Vec<Problem> {
    let platforms: Vec<String> = profiles(config)
        .into_iter()
        .map(|p| p.id.to_string())
        .collect();
    let servers: Vec<String> = config.mcp.servers.iter().map(|s| s.name.clone()).collect();
    let mut lists: Vec<(String, &Vec<String>)> = vec![(
        "tools.disabled_toolsets".into(),
        &config.tools.disabled_toolsets,
    )];
    for (platform, list) in [
        ("telegram", &config.telegram.toolsets),
        ("discord", &config.discord.toolsets),
        ("slack", &config.slack.toolsets),
    ] {
        if let Some(list) = list {
            lists.push((format!("{platform}.toolsets"), list));
        }
    }
    for (i, route) in config.webhook.routes.iter().enumerate() {
        if let Some(list) = &route.toolsets {
            lists.push((format!("webhook.routes[{i}].toolsets"), list));
        }
    }
    lists.push(("cron.group_toolsets".into(), &config.cron.group_toolsets));
    for (i, job) in config.cron.jobs.iter().enumerate() {
        lists.push((format!("cron.jobs[{i}].toolsets"), &job.toolsets));
    }
    lists
        .into_iter()
        .filter_map(|(key, list)| {
            let unknown: Vec<&str> = list
                .iter()
                .filter(|name| {
                    !crate::tools::toolsets::is_known_statically(name, &platforms, &servers)
                })
                .map(String::as_str)
                .collect();
            (!unknown.is_empty())
                .then(|| Problem::new(key, format!("unknown toolset(s): {}", unknown.join(", "))))
        })
        .collect()
}

/// Adds the compiled-in adapters to `daemon`: their profiles, routes and
/// components; each starts only when its config section enables it.
pub fn install<W: Wiring>(daemon: W) -> W {
    let mut daemon = daemon;
    for profile in profiles(&daemon.config().clone()) {
        daemon = daemon.platform(profile);
    }
    #[cfg(feature = "webhook")]
    let daemon = daemon.routes_with(Box::new(webhook::router));
    #[cfg(feature = "telegram")]
    let daemon = telegram::install(daemon);
    #[cfg(feature = "slack")]
    let daemon = slack::install(daemon);
    #[cfg(feature = "discord")]
    let daemon = discord::install(daemon);
    daemon
}
