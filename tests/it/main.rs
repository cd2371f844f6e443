//! The integration tests, one binary: each module is a suite, `common` holds
//! the fakes and helpers they share.

mod access;
mod agent;
mod agent_context;
mod agent_providers;
mod approvals_corpus;
mod approvals_flow;
mod chat;
mod cli_tools;
mod common;
mod compliance;
mod config;
mod crash;
mod daemon;
mod deploy;
mod discord;
mod discord_buttons;
mod explain;
mod file_tools;
mod http;
mod lifecycle;
mod mcp;
mod runtime;
mod secrets;
mod sessions_manager;
mod sessions_memory;
mod slack;
mod store;
mod telegram;
mod terminal_tools;
mod tls;
mod tool_registry;
mod toolsets;
mod vision_messaging;
mod web_tools;
mod webhook;
