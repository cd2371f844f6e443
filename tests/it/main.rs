//! The integration tests, one binary: each module is a suite, `common` holds
//! the fakes and helpers they share.

mod abuse;
mod access;
mod agent;
mod agent_answers;
mod agent_context;
mod agent_models;
mod agent_providers;
mod approvals_corpus;
mod approvals_flow;
mod approvals_obfuscation;
mod budgets;
mod chat;
mod cli_tools;
mod commands_once;
mod common;
mod compliance;
mod config;
mod console;
mod console_limits;
mod containment;
mod crash;
mod cron;
mod daemon;
mod deploy;
mod discord;
mod discord_buttons;
mod disk_reserve;
mod explain;
mod file_tools;
mod fuzz;
mod http;
mod http_limits;
mod identity;
mod lifecycle;
mod mcp;
mod process_reports;
mod replicas;
mod revisions;
mod runtime;
mod secrets;
mod sessions_manager;
mod sessions_memory;
mod sessions_steer;
mod sessions_storable;
mod slack;
mod storage_outage;
mod store;
mod streaming;
mod telegram;
mod terminal_tools;
mod tls;
mod tool_registry;
mod toolsets;
mod vision_messaging;
mod voice;
mod web_tools;
mod webhook;

/// Starts [`common::watchdog`] as the binary loads, before any test.
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static WATCHDOG: extern "C" fn() = common::watchdog;
