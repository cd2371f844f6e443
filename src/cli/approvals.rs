//! `switchboard approvals list|revoke|verify|explain`.

use std::io::{BufWriter, Read, Write};

use clap::Subcommand;
use serde_json::json;

use crate::approvals::{Evaluation, Verdict, evaluate};
use crate::config::Config;

/// `switchboard approvals …`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Show the permanent allowlist and the most recent requests.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// How many recent requests.
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Remove a pattern key from the permanent allowlist.
    Revoke {
        /// The pattern key (see `approvals list`).
        key: String,
    },
    /// Check the hash chain of the audit trail; exit 1 at the first broken row.
    Verify,
    /// Explain what would happen to a command, without running it.
    ///
    /// Prints the normalised form, each sub-command, every matched pattern
    /// and the verdict. Exit codes: 0 no match or allowed, 10 needs
    /// approval, 20 hard-blocked (with --stdin: the highest over all lines).
    Explain {
        /// Print JSON (one object per line with --stdin).
        #[arg(long)]
        json: bool,
        /// Take this session's grants into account.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Read one command per line from standard input.
        #[arg(long, conflicts_with = "command")]
        stdin: bool,
        /// The command (put it after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

fn verdict_text(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::NoMatch => "no match: runs",
        Verdict::AllowedByAllowlist => "allowed by the permanent allowlist: runs",
        Verdict::AllowedBySessionGrant => "allowed by a session grant: runs",
        Verdict::NeedsApproval => "needs approval",
        Verdict::HardBlocked => "hard-blocked: never runs",
    }
}

fn human(command: &str, e: &Evaluation) -> String {
    let mut out = format!(
        "command:    {command}\nnormalized: {}\ncommands:\n",
        e.detection.normalized
    );
    for c in &e.detection.commands {
        out.push_str(&format!("  - {c}\n"));
    }
    if e.detection.matches.is_empty() {
        out.push_str("matches:    none\n");
    } else {
        out.push_str("matches:\n");
        for m in &e.detection.matches {
            let hard = if m.hard { " [hard block]" } else { "" };
            out.push_str(&format!(
                "  {}{hard}: {} (in `{}`)\n",
                m.key, m.description, m.command
            ));
        }
    }
    out.push_str(&format!("verdict:    {}\n", verdict_text(e.verdict)));
    out
}

fn one_line(command: &str, e: &Evaluation, as_json: bool) -> String {
    if as_json {
        let mut v = serde_json::to_value(e).unwrap_or_default();
        v["command"] = json!(command);
        v.to_string()
    } else {
        let verdict = serde_json::to_value(e.verdict).unwrap_or_default();
        format!(
            "{}\t{}\t{command}",
            verdict.as_str().unwrap_or_default(),
            e.detection.keys().join(",")
        )
    }
}

/// Reads the allowlist (and a session's grants) when storage can be opened;
/// explain works without it.
async fn grants(config: &Config, session: Option<&str>) -> (Vec<String>, Vec<String>) {
    let store = match super::open_store(config).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("warning: storage unavailable ({err}); assuming an empty allowlist");
            return (Vec::new(), Vec::new());
        }
    };
    let allowlist = store
        .allowlist()
        .await
        .map(|entries| entries.into_iter().map(|e| e.pattern_key).collect())
        .unwrap_or_default();
    let session_grants = match session {
        Some(id) => store.session_grants(id, None).await.unwrap_or_default(),
        None => Vec::new(),
    };
    store.close().await;
    (allowlist, session_grants)
}

/// Runs an approvals subcommand; returns the process exit code.
pub async fn run(config: &Config, command: ApprovalsCommand) -> anyhow::Result<u8> {
    match command {
        ApprovalsCommand::Explain {
            json,
            session,
            stdin,
            command,
        } => {
            let (allowlist, session_grants) = grants(config, session.as_deref()).await;
            if stdin {
                let mut input = String::new();
                std::io::stdin().read_to_string(&mut input)?;
                let mut out = BufWriter::new(std::io::stdout().lock());
                let mut code = 0;
                let body = input.strip_suffix('\n').unwrap_or(&input);
                if !input.is_empty() {
                    for line in body.split('\n') {
                        let e = evaluate(line, &allowlist, &session_grants);
                        code = code.max(e.verdict.exit_code());
                        writeln!(out, "{}", one_line(line, &e, json))?;
                    }
                }
                out.flush()?;
                return Ok(code);
            }
            if command.is_empty() {
                anyhow::bail!("give a command after `--`, or use --stdin");
            }
            let line = command.join(" ");
            let e = evaluate(&line, &allowlist, &session_grants);
            if json {
                println!("{}", one_line(&line, &e, true));
            } else {
                print!("{}", human(&line, &e));
            }
            Ok(e.verdict.exit_code())
        }
        ApprovalsCommand::List { json, limit } => {
            let store = super::open_store(config).await?;
            let allowlist = store.allowlist().await?;
            let recent = store.list_approvals(limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"allowlist": allowlist, "recent": recent})
                    )?
                );
            } else {
                println!("permanent allowlist:");
                if allowlist.is_empty() {
                    println!("  (empty)");
                }
                for e in &allowlist {
                    println!("  {:<24} added by {}", e.pattern_key, e.added_by);
                }
                println!("recent requests:");
                for r in &recent {
                    println!(
                        "  {} {:<17} {:<24} {}",
                        &r.id[..8],
                        r.status.as_str(),
                        r.pattern_keys.0.join(","),
                        crate::render::clip(&r.command, 60)
                    );
                }
            }
            Ok(0)
        }
        ApprovalsCommand::Revoke { key } => {
            let store = super::open_store(config).await?;
            if store.revoke_pattern(&key).await? {
                println!("revoked {key}");
                Ok(0)
            } else {
                eprintln!("error: {key} is not on the allowlist");
                Ok(1)
            }
        }
        ApprovalsCommand::Verify => {
            let store = super::open_store(config).await?;
            let check = store.verify_audit().await?;
            match check.first_broken {
                None => {
                    println!("audit chain intact: {} rows", check.rows);
                    Ok(0)
                }
                Some(id) => {
                    println!("audit chain broken at row {id} (of {})", check.rows);
                    Ok(1)
                }
            }
        }
    }
}
