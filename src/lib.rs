//! switchboard: a gateway daemon that connects Telegram, Discord, Slack and
//! a webhook receiver to tool-using LLM agents.
//!
//! The folders are the architecture: [`config`] (the contract of
//! `gateway.toml`), [`store`] (SQLite / PostgreSQL), [`http`] (router,
//! health, metrics), [`daemon`] (lifecycle), [`cli`], [`telemetry`].

pub mod adapters;
pub mod agent;
pub mod approvals;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod http;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tools;
