//! `switchboard cron list|show|runs` and `switchboard usage`.

use clap::Subcommand;
use serde_json::json;

use crate::budgets::{Window, money, usage_in, utc};
use crate::config::Config;
use crate::store::{CronJob, CronRun, now_ms};

/// `switchboard cron …`.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every job: schedule, next run, last run.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One job (by id or name) and its latest runs.
    Show {
        /// Job id or name.
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The latest runs, of one job or of all: status and delivery.
    Runs {
        /// Job id or name (all jobs when left out).
        job: Option<String>,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn next(job: &CronJob) -> String {
    match (job.paused, job.next_at) {
        (0, Some(at)) => utc(at),
        (0, None) => "never (done)".into(),
        _ => "paused".into(),
    }
}

fn run_line(run: &CronRun) -> String {
    format!(
        "{:>6}  {:<20}  {:<18}  {:<10}  {:<8}  {}",
        run.id,
        run.job_id,
        utc(run.slot_at),
        run.status,
        run.delivery,
        run.detail.as_deref().unwrap_or("")
    )
}

/// Runs a cron subcommand; returns the exit code. One arm per
/// subcommand, each short.
pub async fn run(config: &Config, command: CronCommand) -> anyhow::Result<u8> {
    let store = super::open_store(config).await?;
    let code = match command {
        CronCommand::List { json } => {
            let jobs = store.jobs().await?;
            let mut listed = Vec::new();
            for job in jobs {
                let last = store.runs(Some(&job.id), 1).await?.into_iter().next();
                listed.push((job, last));
            }
            if json {
                let jobs: Vec<_> = listed
                    .iter()
                    .map(|(job, last)| json!({ "job": job, "last_run": last }))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "jobs": jobs }))?
                );
            } else if listed.is_empty() {
                println!("no scheduled jobs");
            } else {
                for (job, last) in listed {
                    let last = last.map_or_else(
                        || "no run yet".to_string(),
                        |r| format!("last {} {} / {}", utc(r.slot_at), r.status, r.delivery),
                    );
                    println!(
                        "{:<20}  {:<24}  {:<24}  next {:<20}  {}  → {}:{}",
                        job.id,
                        job.name,
                        job.schedule,
                        next(&job),
                        last,
                        job.platform,
                        job.chat_id
                    );
                }
            }
            0
        }
        CronCommand::Show { job, json } => match store.job(&job).await? {
            None => {
                eprintln!("error: no job {job}");
                1
            }
            Some(job) => {
                let runs = store.runs(Some(&job.id), 10).await?;
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json!({ "job": job, "runs": runs }))?
                    );
                } else {
                    let zone = if job.timezone.is_empty() {
                        "UTC"
                    } else {
                        &job.timezone
                    };
                    println!("{} ({}, {})", job.name, job.id, job.origin);
                    println!(
                        "schedule  {} ({zone}), missed runs: {}",
                        job.schedule, job.missed
                    );
                    println!("next      {}", next(&job));
                    println!("posts to  {}:{}", job.platform, job.chat_id);
                    println!(
                        "owner     {} (told in {})",
                        if job.owner_user.is_empty() {
                            "-"
                        } else {
                            &job.owner_user
                        },
                        job.owner_chat
                    );
                    println!("prompt    {}", crate::render::clip(&job.prompt, 300));
                    println!("runs (status / delivery):");
                    for r in &runs {
                        println!("{}", run_line(r));
                    }
                }
                0
            }
        },
        CronCommand::Runs { job, limit, json } => {
            let id = match &job {
                Some(name) => match store.job(name).await? {
                    Some(job) => Some(job.id),
                    // Runs outlive a deleted job.
                    None => Some(name.clone()),
                },
                None => None,
            };
            let runs = store.runs(id.as_deref(), limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({ "runs": runs }))?
                );
            } else {
                println!(
                    "{:>6}  {:<20}  {:<18}  {:<10}  {:<8}  detail",
                    "run", "job", "slot", "status", "delivery"
                );
                for r in &runs {
                    println!("{}", run_line(r));
                }
            }
            0
        }
    };
    store.close().await;
    Ok(code)
}

/// `switchboard usage`: spend today and this month per user, chat, route
/// and job, with the caps and what is left.
pub async fn usage(config: &Config, json: bool) -> anyhow::Result<u8> {
    let store = super::open_store(config).await?;
    let now = now_ms();
    let mut windows = Vec::new();
    for window in [Window::Day, Window::Month] {
        let (start, end) = window.bounds(now);
        let rows = usage_in(&store, &config.budgets, window, now).await?;
        windows.push((window, start, end, rows));
    }
    if json {
        let out: Vec<_> = windows
            .iter()
            .map(|(window, start, end, rows)| {
                json!({
                    "window": window.name(),
                    "from": start,
                    "until": end,
                    "spend": rows.iter().map(|(row, standing)| json!({
                        "level": row.level,
                        "platform": row.platform,
                        "id": row.id,
                        "turns": row.turns,
                        "tokens": row.tokens,
                        "cost": row.cost_micros as f64 / 1e6,
                        "held_tokens": row.held_tokens,
                        "held_cost": row.held_micros as f64 / 1e6,
                        "cost_cap": standing.as_ref().map(|s| s.cost_cap as f64 / 1e6),
                        "token_cap": standing.as_ref().map(|s| s.token_cap),
                        "used_percent": standing.as_ref().map(|s| (s.share() * 100.0).round()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "usage": out }))?
        );
    } else {
        for (window, start, end, rows) in windows {
            println!("{} ({} – {}):", window.name(), utc(start), utc(end));
            if rows.is_empty() {
                println!("  nothing spent");
            }
            for (row, standing) in rows {
                let who = if row.platform.is_empty() {
                    row.id.clone()
                } else {
                    format!("{}:{}", row.platform, row.id)
                };
                let cap = standing.map_or_else(
                    || "no cap".to_string(),
                    |s| format!("{:.0}% of its cap: {}", s.share() * 100.0, s.describe()),
                );
                let held = if row.held_tokens > 0 || row.held_micros > 0 {
                    format!(
                        " (+{} / {} tokens held by running turns)",
                        money(row.held_micros),
                        row.held_tokens
                    )
                } else {
                    String::new()
                };
                println!(
                    "  {:<6} {:<32} {:>5} turns {:>9} tokens {:>10}{held}  {cap}",
                    row.level,
                    who,
                    row.turns,
                    row.tokens,
                    money(row.cost_micros)
                );
            }
        }
    }
    store.close().await;
    Ok(0)
}
