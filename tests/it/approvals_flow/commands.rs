//! Decisions written as text (`/approve`, `/deny`): the request they
//! mean, in the chat and the thread they were written in.

use super::*;

/// Asks `broker` to carry out `text` when it is a decision command.
async fn resolve_text(
    broker: &Broker,
    chat: &ChatRef,
    actor: &Actor,
    text: &str,
) -> Option<Result<Decision, Refusal>> {
    let command = ChatCommand::parse(text).filter(ChatCommand::is_decision)?;
    Some(
        broker
            .decide_command(chat, actor, &command, false)
            .await
            .map(|(decision, _)| decision),
    )
}

#[tokio::test]
async fn text_commands_resolve_the_one_pending_request_or_ask_which() {
    let s = setup().await;
    let sid = session(&s.store, "1").await;
    let chat = ChatRef {
        platform: "telegram".into(),
        chat: "1".into(),
        thread: None,
    };
    assert!(
        resolve_text(&s.broker, &chat, &actor("1"), "hello there")
            .await
            .is_none()
    );
    assert_eq!(
        resolve_text(&s.broker, &chat, &actor("1"), "/approve").await,
        Some(Err(Refusal::NothingPending))
    );

    let first = spawn_request(&s, request(&sid, Some("1"), "rm -rf a"));
    let first_id = s.adapter.prompt(1).await.approval_id;
    let second = spawn_request(&s, request(&sid, Some("1"), "git push -f"));
    let second_id = s.adapter.prompt(2).await.approval_id;
    // Two wait: an id-less command decides neither, and names both.
    let Some(Err(Refusal::WhichOne(listed))) =
        resolve_text(&s.broker, &chat, &actor("1"), "/approve session").await
    else {
        panic!("two requests wait; the command named none");
    };
    assert!(
        listed.contains(&format!("{first_id} (rm -rf a)"))
            && listed.contains(&format!("{second_id} (git push -f)")),
        "{listed}"
    );
    let text = format!("!deny {second_id} force pushes need review");
    let out = resolve_text(&s.broker, &chat, &actor("99"), &text)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out,
        Decision::Denied {
            by: "user99".into(),
            reason: Some("force pushes need review".into())
        }
    );
    assert_eq!(second.await.unwrap(), out);
    // One waits: it is the one decided, and the reply names its command.
    let command = ChatCommand::parse("/approve session").unwrap();
    let (out, asked) = s
        .broker
        .decide_command(&chat, &actor("1"), &command, false)
        .await
        .unwrap();
    assert!(matches!(out, Decision::Session { .. }));
    assert_eq!(asked, "rm -rf a");
    assert!(matches!(first.await.unwrap(), Decision::Session { .. }));
    assert_eq!(
        s.store.session_grants(&sid, None).await.unwrap(),
        ["recursive_delete"]
    );

    let third = spawn_request(&s, request(&sid, Some("1"), "docker stop web"));
    s.adapter.prompt(3).await;
    resolve_text(&s.broker, &chat, &actor("99"), "/approve always")
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(third.await.unwrap(), Decision::Always { .. }));
    assert!(s.store.is_pattern_allowed("docker_stop").await.unwrap());
}

/// An id-less command written in a thread means a request of that thread
/// only: an approver's `/approve always` in her own thread never decides
/// another thread's older request.
#[tokio::test]
async fn a_command_in_a_thread_decides_only_that_threads_request() {
    let s = setup().await;
    let topic = |thread: &str| ChatRef {
        platform: "telegram".into(),
        chat: "-100".into(),
        thread: Some(thread.into()),
    };
    let mut sids = Vec::new();
    for (user, thread) in [("1", "10"), ("2", "20")] {
        let sid = s
            .store
            .open_session(&NewSession {
                key: &format!("telegram:-100:{thread}"),
                platform: "telegram",
                chat_id: "-100",
                thread_id: Some(thread),
                user_id: Some(user),
            })
            .await
            .unwrap()
            .id;
        sids.push(sid);
    }
    let older = spawn_request(&s, request(&sids[0], Some("1"), "rm -rf a"));
    s.adapter.prompt(1).await;
    assert_eq!(
        resolve_text(&s.broker, &topic("20"), &actor("99"), "/approve always").await,
        Some(Err(Refusal::NothingPending))
    );
    let newer = spawn_request(&s, request(&sids[1], Some("2"), "git push -f"));
    s.adapter.prompt(2).await;
    let out = resolve_text(&s.broker, &topic("20"), &actor("99"), "/deny")
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(out, Decision::Denied { .. }));
    assert!(matches!(newer.await.unwrap(), Decision::Denied { .. }));
    assert!(
        !older.is_finished(),
        "the other thread's request still waits"
    );
    resolve_text(&s.broker, &topic("10"), &actor("1"), "/approve")
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(older.await.unwrap(), Decision::Once { .. }));
}
