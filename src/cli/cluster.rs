//! `switchboard cluster status`.

use clap::Subcommand;

use crate::config::Config;
use crate::store::{BackendKind, LeaseRow, ReplicaRow};

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
    // Reads only: a newer CLI does not migrate the replicas' schema.
    let store = crate::store::Store::connect(&config.storage).await?;
    if store.kind() == BackendKind::Sqlite {
        println!("SQLite: one replica (several replicas need PostgreSQL)");
        return Ok(0);
    }
    let (replicas, now) = store.replicas().await?;
    let leases = store.leases().await?;
    let lease_ms = i64::try_from(config.cluster.lease_secs * 1000).unwrap_or(i64::MAX);
    let rows: Vec<Row> = replicas
        .iter()
        .map(|r| Row::of(r, &leases, now, lease_ms))
        .collect();
    if json {
        let replicas: Vec<_> = rows.iter().map(Row::json).collect();
        println!("{}", serde_json::json!({ "replicas": replicas }));
        return Ok(0);
    }
    println!("replicas:");
    for row in &rows {
        println!("  {}", row.line());
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

/// A replica as `cluster status` shows it.
struct Row<'a> {
    replica: &'a ReplicaRow,
    /// The database's clock when read.
    now: i64,
    state: &'static str,
    seen_ms_ago: i64,
    holds: Vec<&'a LeaseRow>,
    sessions: usize,
    /// The last move and how long ago it was made.
    last_move: Option<(&'a str, i64)>,
}

impl<'a> Row<'a> {
    /// `replica` at database time `now`: `alive` while it renews,
    /// `suspect` once a renewal is missed (half a lease without one),
    /// `gone` once its leases could have lapsed.
    fn of(replica: &'a ReplicaRow, leases: &'a [LeaseRow], now: i64, lease_ms: i64) -> Self {
        let seen_ms_ago = now - replica.seen_at;
        let state = if seen_ms_ago > lease_ms {
            "gone"
        } else if seen_ms_ago > lease_ms / 2 {
            "suspect"
        } else {
            "alive"
        };
        let holds: Vec<&LeaseRow> = leases
            .iter()
            .filter(|l| l.holder == replica.id && l.expires_at > now)
            .collect();
        let sessions = holds
            .iter()
            .filter(|l| l.name.starts_with("session:"))
            .count();
        let last_move =
            (replica.moved_at > 0).then(|| (replica.last_move.as_str(), now - replica.moved_at));
        Self {
            replica,
            now,
            state,
            seen_ms_ago,
            holds,
            sessions,
            last_move,
        }
    }

    fn json(&self) -> serde_json::Value {
        let r = self.replica;
        let holds: Vec<_> = self
            .holds
            .iter()
            .map(|l| serde_json::json!({"lease": l.name, "token": l.token, "expires_in_ms": l.expires_at - self.now}))
            .collect();
        serde_json::json!({
            "id": r.id,
            "name": r.name,
            "state": self.state,
            "alive": self.state == "alive",
            "seen_ms_ago": self.seen_ms_ago,
            "started_at": r.started_at,
            "sessions": self.sessions,
            "turns": r.turns,
            "moves_out": r.moves_out,
            "moves_in": r.moves_in,
            "last_move": self.last_move.map(|(what, ago)| serde_json::json!({"move": what, "ms_ago": ago})),
            "holds": holds,
        })
    }

    fn line(&self) -> String {
        let r = self.replica;
        let ingress: Vec<&str> = self
            .holds
            .iter()
            .filter_map(|l| l.name.strip_prefix("ingress:"))
            .collect();
        let role = if ingress.is_empty() {
            "standby".to_string()
        } else {
            format!("leads {}", ingress.join(", "))
        };
        let moved = match self.last_move {
            Some((what, ago)) => format!("; last move {what}, {:.1} s ago", ago as f64 / 1000.0),
            None => String::new(),
        };
        format!(
            "{:<28} {:<7}  seen {:.1} s ago  {role}; owns {} sessions, {} turns running; moves out {} in {}{moved}  ({})",
            r.name,
            self.state,
            self.seen_ms_ago as f64 / 1000.0,
            self.sessions,
            r.turns,
            r.moves_out,
            r.moves_in,
            r.id
        )
    }
}
