//! `switchboard chat`: a conversation at the terminal through the same
//! session manager, agent, tools and storage the daemon uses. The session
//! key is `cli:dm:<user>`; /new, /stop, /status and /help work as in any
//! chat, approvals (through the same broker) and questions are asked at
//! the terminal.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::adapters::console::{self, Console, ConsoleInput};
use crate::agent::AgentDeps;
use crate::approvals::{ApprovalPolicy, Broker};
use crate::config::{Config, Env};
use crate::sessions::{Links, ManagerSettings, SessionManager, Submitted};
use crate::tools::{ToolRuntime, mcp};

/// Runs the chat: one turn for `once`, else a prompt loop until end of
/// input or `/quit`.
pub async fn chat(
    config: Config,
    env: Env,
    once: Option<String>,
    user: String,
) -> anyhow::Result<()> {
    let store = super::open_store(&config).await?;
    let platforms = crate::adapters::platforms(&config);
    let tools = ToolRuntime::build(&config, &env, platforms.clone())?;
    let stop = CancellationToken::new();
    for server in &config.mcp.servers {
        tokio::spawn(mcp::supervise(
            server.clone(),
            env.clone(),
            tools.registry.clone(),
            crate::telemetry::Health::default(),
            stop.child_token(),
        ));
    }
    let processes = tools.processes.clone();
    let deps = Arc::new(AgentDeps::from_config(&config, &env, tools, store.clone()));
    let input = ConsoleInput::default();
    let interactive = once.is_none();
    let broker = Arc::new(Broker::new(
        store.clone(),
        &config.approvals,
        platforms.clone(),
    ));
    let policy = ApprovalPolicy::new(
        store.clone(),
        broker.clone(),
        config.approvals.mode,
        Some(deps.auxiliary.clone()),
    );
    let manager = SessionManager::new(
        config.clone(),
        deps,
        Links::single(Arc::new(policy), broker),
        ManagerSettings::from_config(&config),
        stop.child_token(),
    );
    let port = Console::new(input.clone(), interactive, manager.clone());
    platforms.attach(console::ID, Arc::new(port));
    manager.replay().await?;

    let result = match once {
        Some(message) => send(&manager, &user, &message).await,
        None => {
            eprintln!(
                "switchboard chat — session cli:dm:{user}. /new starts over, /help lists commands, /quit leaves."
            );
            loop {
                eprint!("\nyou> ");
                let Some(line) = input.line().await else {
                    break;
                };
                match line.trim() {
                    "" => continue,
                    "/quit" | "/exit" => break,
                    text => {
                        if let Err(err) = send(&manager, &user, text).await {
                            eprintln!("error: {err:#}");
                        }
                    }
                }
            }
            Ok(())
        }
    };
    platforms.detach(console::ID);
    stop.cancel();
    manager.wait().await;
    processes.shutdown().await;
    store.close().await;
    result
}

/// Submits one line and waits until its turn is done.
async fn send(manager: &SessionManager, user: &str, text: &str) -> anyhow::Result<()> {
    match manager.submit_tracked(Console::event(user, text)).await? {
        (Submitted::Accepted, Some(done)) => {
            let _ = done.await;
            Ok(())
        }
        (Submitted::Busy, _) => anyhow::bail!("the session is busy; try again"),
        _ => Ok(()),
    }
}
