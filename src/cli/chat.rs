//! `switchboard chat`: a conversation at the terminal with the same agent,
//! tools and storage the daemon uses.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::adapters::console::{ConsoleApprovals, ConsoleClarify, ConsoleEvents, ConsoleInput};
use crate::agent::{AgentDeps, Conversation, SessionContext};
use crate::approvals::ApprovalPolicy;
use crate::config::{Config, Env};
use crate::store::{NewSession, Store};
use crate::tools::{ToolRuntime, mcp, platform_toolsets};

/// Runs the chat: one turn for `once`, else a prompt loop until end of
/// input or `/quit`. `/new` starts a fresh session.
pub async fn chat(
    config: Config,
    env: Env,
    once: Option<String>,
    user: String,
) -> anyhow::Result<()> {
    let store = Store::open(&config.storage).await?;
    let tools = ToolRuntime::build(&config, &env)?;
    let stop = CancellationToken::new();
    for server in &config.mcp.servers {
        tokio::spawn(mcp::supervise(
            server.clone(),
            tools.registry.clone(),
            crate::daemon::Health::default(),
            stop.child_token(),
        ));
    }
    let processes = tools.processes.clone();
    let deps = Arc::new(AgentDeps::from_config(&config, &env, tools, store.clone()));
    let input = ConsoleInput::default();
    let interactive = once.is_none();
    let key = format!("cli:dm:{user}");
    let open = |store: Store, deps: Arc<AgentDeps>, input: ConsoleInput| {
        let key = key.clone();
        let user = user.clone();
        let config = config.clone();
        async move {
            let session = store
                .open_session(&NewSession {
                    key: &key,
                    platform: "cli",
                    chat_id: &user,
                    thread_id: None,
                    user_id: Some(&user),
                })
                .await?;
            let context = SessionContext {
                platform: "the local terminal".into(),
                chat_type: "direct message".into(),
                user_name: Some(user.clone()),
                thread: None,
            };
            let human = Arc::new(ConsoleApprovals::new(
                input.clone(),
                interactive,
                store.clone(),
            ));
            let policy = ApprovalPolicy::new(
                store.clone(),
                human,
                config.approvals.mode,
                Some(deps.auxiliary.clone()),
            );
            let conversation = Conversation::open(
                deps,
                session,
                context,
                platform_toolsets(&config, "cli"),
                Arc::new(policy),
            )
            .await?
            .with_clarify(Arc::new(ConsoleClarify::new(input)))
            .with_events(Arc::new(ConsoleEvents));
            anyhow::Ok(conversation)
        }
    };
    let mut conversation = open(store.clone(), deps.clone(), input.clone()).await?;

    let result = if let Some(message) = once {
        run_one(&mut conversation, &message).await
    } else {
        eprintln!("switchboard chat — session {key}. /new starts over, /quit leaves.");
        loop {
            eprint!("\nyou> ");
            let Some(line) = input.line().await else {
                break;
            };
            match line.trim() {
                "" => continue,
                "/quit" | "/exit" => break,
                "/new" | "/reset" => {
                    store
                        .end_session(&conversation.session().id, "reset")
                        .await?;
                    conversation = open(store.clone(), deps.clone(), input.clone()).await?;
                    eprintln!("(new session)");
                }
                text => {
                    if let Err(err) = run_one(&mut conversation, text).await {
                        eprintln!("error: {err:#}");
                    }
                }
            }
        }
        Ok(())
    };
    stop.cancel();
    processes.shutdown().await;
    store.close().await;
    result
}

async fn run_one(conversation: &mut Conversation, text: &str) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    let outcome = conversation.run_turn(text, &cancel).await?;
    println!("{}", outcome.reply);
    Ok(())
}
