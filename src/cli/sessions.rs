//! `switchboard sessions list|show|search`.

use clap::Subcommand;
use serde_json::json;

use crate::config::Config;

/// `switchboard sessions …`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// The most recently active sessions.
    List {
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One session's messages.
    Show {
        /// Session id (from `sessions list`).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Full-text search over stored messages.
    Search {
        /// Words that must all occur.
        query: String,
        /// How many hits.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn when(ms: i64) -> String {
    crate::clock::iso(ms)
}

/// Runs a sessions subcommand; returns the exit code.
pub async fn run(config: &Config, command: SessionsCommand) -> anyhow::Result<u8> {
    let store = super::open_store(config).await?;
    let code = match command {
        SessionsCommand::List { limit, json } => {
            let sessions = store.list_sessions(limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "sessions": sessions }))?
                );
            } else {
                for s in sessions {
                    let state = if s.ended_at.is_some() {
                        "ended"
                    } else {
                        "open"
                    };
                    println!(
                        "{}  {:<5}  {}  {}",
                        s.id,
                        state,
                        when(s.last_active_at),
                        s.key
                    );
                }
            }
            0
        }
        SessionsCommand::Show { id, json } => match store.session(&id).await? {
            None => {
                eprintln!("error: no session {id}");
                1
            }
            Some(session) => {
                let messages = store.messages(&id).await?;
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(
                            &json!({ "session": session, "messages": messages })
                        )?
                    );
                } else {
                    println!(
                        "{} ({}) since {}",
                        session.key,
                        session.id,
                        when(session.created_at)
                    );
                    if let Some(parent) = &session.parent_id {
                        println!("continues session {parent} (it outgrew the context window)");
                    }
                    if let Some(model) = &session.model {
                        println!("model chosen with /model: {model}");
                    }
                    for m in messages {
                        let text = if m.content.is_empty() {
                            m.tool_calls.unwrap_or_default()
                        } else {
                            m.content
                        };
                        println!(
                            "[{}] {}: {}",
                            when(m.created_at),
                            m.role,
                            crate::render::clip(&text, 500)
                        );
                    }
                }
                0
            }
        },
        SessionsCommand::Search { query, limit, json } => {
            let hits = store.search_messages(&query, None, limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "hits": hits }))?
                );
            } else {
                for h in hits {
                    println!(
                        "{}  {}  {}: {}",
                        h.session_id,
                        h.session_key,
                        h.role,
                        crate::render::clip(&h.content, 200)
                    );
                }
            }
            0
        }
    };
    store.close().await;
    Ok(code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_render_in_utc() {
        assert_eq!(super::when(0), "1970-01-01 00:00:00Z");
        assert_eq!(super::when(1_795_000_000_000), "2026-11-18 11:06:40Z");
    }
}
