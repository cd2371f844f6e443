//! `switchboard cluster status`.

use clap::Subcommand;

use crate::config::Config;
use crate::store::BackendKind;

/// `switchboard cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// The replicas on this database, and who holds what.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a cluster subcommand; returns the exit code.
pub async fn run(config: &Config, command: ClusterCommand) -> anyhow::Result<u8> {
    let ClusterCommand::Status { json } = command;
    let store = super::open_store(config).await?;
    if store.kind() == BackendKind::Sqlite {
        println!("SQLite: one replica (several replicas need PostgreSQL)");
        return Ok(0);
    }
    let (replicas, now) = store.replicas().await?;
    let leases = store.leases().await?;
    let alive = |seen: i64| {
        now - seen <= i64::try_from(config.cluster.lease_secs * 1000).unwrap_or(i64::MAX)
    };
    if json {
        let replicas: Vec<_> = replicas
            .iter()
            .map(|r| {
                let held: Vec<_> = leases
                    .iter()
                    .filter(|l| l.holder == r.id && l.expires_at > now)
                    .map(|l| serde_json::json!({"lease": l.name, "token": l.token, "expires_in_ms": l.expires_at - now}))
                    .collect();
                serde_json::json!({
                    "id": r.id, "name": r.name, "alive": alive(r.seen_at),
                    "seen_ms_ago": now - r.seen_at, "started_at": r.started_at, "holds": held,
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "replicas": replicas }));
        return Ok(0);
    }
    println!("replicas:");
    for r in &replicas {
        let state = if alive(r.seen_at) { "alive" } else { "gone" };
        let held: Vec<&str> = leases
            .iter()
            .filter(|l| l.holder == r.id && l.expires_at > now)
            .map(|l| l.name.as_str())
            .collect();
        let ingress: Vec<&str> = held
            .iter()
            .filter_map(|n| n.strip_prefix("ingress:"))
            .collect();
        let sessions = held.iter().filter(|n| n.starts_with("session:")).count();
        let role = if ingress.is_empty() {
            "standby".to_string()
        } else {
            format!("leads {}", ingress.join(", "))
        };
        println!(
            "  {:<28} {state:<5}  seen {:.1} s ago  {role}; owns {sessions} sessions  ({})",
            r.name,
            (now - r.seen_at) as f64 / 1000.0,
            r.id
        );
    }
    println!("ingress:");
    for l in leases.iter().filter(|l| l.name.starts_with("ingress:")) {
        let holder = replicas
            .iter()
            .find(|r| r.id == l.holder)
            .map_or(l.holder.as_str(), |r| r.name.as_str());
        let state = if l.expires_at > now {
            format!("expires in {:.1} s", (l.expires_at - now) as f64 / 1000.0)
        } else {
            "lapsed".to_string()
        };
        println!(
            "  {:<20} {holder}  token {}  held {:.1} s, {state}",
            l.name.trim_start_matches("ingress:"),
            l.token,
            (now - l.acquired_at) as f64 / 1000.0
        );
    }
    Ok(0)
}
