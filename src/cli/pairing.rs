//! `switchboard pairing list|approve|revoke`.

use clap::Subcommand;

use crate::config::Config;
use crate::sessions::ApproveOutcome;
use crate::sessions::access::approve_code;

/// `switchboard pairing …`.
#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Show waiting pairing codes and paired users.
    List,
    /// Admit the sender of a pairing code.
    Approve {
        /// Platform (telegram, discord, slack).
        platform: String,
        /// The 8-character code the sender got.
        code: String,
    },
    /// Remove a paired user.
    Revoke {
        /// Platform.
        platform: String,
        /// The user's id on it.
        user: String,
    },
}

/// Runs a pairing subcommand; returns the exit code.
pub async fn run(config: &Config, command: PairingCommand) -> anyhow::Result<u8> {
    let store = super::open_store(config).await?;
    let code = match command {
        PairingCommand::List => {
            println!("waiting codes:");
            for r in store.pairing_requests(None).await? {
                let minutes = (r.expires_at - crate::store::now_ms()).max(0) / 60_000;
                println!(
                    "  {:<9} {}  {} ({})  expires in {minutes} min",
                    r.platform, r.code, r.user_name, r.user_id
                );
            }
            println!("paired users:");
            for u in store.paired_users().await? {
                println!(
                    "  {:<9} {} ({})  approved by {}",
                    u.platform, u.user_name, u.user_id, u.approved_by
                );
            }
            0
        }
        PairingCommand::Approve { platform, code } => {
            match approve_code(&store, &platform, &code, "cli").await? {
                ApproveOutcome::Paired(user) => {
                    println!("paired {} ({}) on {platform}", user.user_name, user.user_id);
                    0
                }
                ApproveOutcome::WrongCode { failures } => {
                    eprintln!(
                        "error: no valid code {code} on {platform} ({failures} failed attempt(s))"
                    );
                    1
                }
                ApproveOutcome::LockedOut { .. } => {
                    eprintln!(
                        "error: too many wrong codes; approvals on {platform} are locked for 15 minutes"
                    );
                    1
                }
            }
        }
        PairingCommand::Revoke { platform, user } => {
            if store.revoke_pairing(&platform, &user).await? {
                println!("revoked {user} on {platform}");
                0
            } else {
                eprintln!("error: {user} is not paired on {platform}");
                1
            }
        }
    };
    store.close().await;
    Ok(code)
}
