//! switchboard: a gateway daemon that connects Telegram, Discord, Slack and
//! a webhook receiver to tool-using LLM agents.
//!
//! The folders are the architecture, and data runs downhill through them:
//! [`adapters`] translate platform traffic → [`sessions`] (intake, workers)
//! → [`agent`] (the loop) → [`tools`] → [`store`]. Beneath them all,
//! [`platform`] is the port every adapter implements and [`render`] turns
//! Markdown into what each platform shows; [`approvals`] holds commands
//! for a human; [`config`] is the contract of `gateway.toml`; [`http`],
//! [`daemon`], [`cli`] and [`telemetry`] run and watch the process.

// Laying out Discord's connection future (its lead loop inside the attach
// inside the component) goes past rustc's default query depth of 128 in
// release builds.
#![recursion_limit = "256"]

pub mod adapters;
pub mod agent;
pub mod approvals;
pub mod budgets;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod cron;
pub mod daemon;
pub mod forge;
pub mod http;
pub mod operator;
pub mod platform;
pub mod private;
pub mod render;
pub mod runtime;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod transcription;
