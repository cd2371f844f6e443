//! The adapter compliance suite: one set of scenarios every chat adapter
//! must pass, run against the fake Telegram, Discord and Slack servers
//! with the real daemon and the real client crates. A [`Rig`] is what a
//! platform's suite knows how to do (write as a person, press a button,
//! see what the bot posted and edited); the scenarios know nothing of
//! platforms.

mod discord;
mod slack;
mod telegram;

use std::time::Duration;

use crate::common::fake_llm::{FakeLlm, Reply, calls, text};

/// Who acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Person {
    /// Allowed to talk to the bot; asks in the scenarios.
    Owner,
    /// Allowed to talk to the bot too, but did not ask and approves nothing.
    Other,
}

/// A message the bot posted.
#[derive(Debug, Clone)]
pub struct Posted {
    /// The platform's id for it.
    pub id: String,
    /// Its text as the platform shows it.
    pub text: String,
    /// The thread (or topic, or thread channel) it went to, if any.
    pub thread: Option<String>,
    /// The data of its buttons.
    pub buttons: Vec<String>,
}

/// What a platform's suite provides.
#[allow(async_fn_in_trait)]
pub trait Rig: Sized {
    /// Longest message the platform takes, in characters of ASCII text.
    const LIMIT: usize;
    /// The daemon with this platform on, the model answering `script`.
    async fn start(script: Vec<Reply>) -> Self;
    /// The scripted model.
    fn llm(&self) -> &FakeLlm;
    /// The running daemon's storage.
    fn store(&self) -> &switchboard::store::Store;
    /// `who` writes `text` to the bot in a group chat's thread (the same
    /// one every time); returns that thread's id.
    async fn say_in_thread(&self, who: Person, text: &str) -> String;
    /// `who` writes `text` to the bot in a group chat, outside threads.
    async fn say(&self, who: Person, text: &str);
    /// Everything the bot posted so far, prompts included, in order.
    fn posted(&self) -> Vec<Posted>;
    /// `who` presses the button with `data` on `message`.
    async fn press(&self, who: Person, message: &Posted, data: &str);
    /// What pressers were told so far (refusals at least), in order.
    fn notices(&self) -> Vec<String>;
    /// The text message `id` was last edited to, if it was.
    fn edited(&self, id: &str) -> Option<String>;
    /// Stops the daemon and starts it again on the same storage.
    async fn restart(self) -> Self;
    /// Stops the daemon.
    async fn stop(self);
}

/// Polls `check` until it finds something (20 s at most).
pub async fn until<T>(what: &str, check: impl Fn() -> Option<T>) -> T {
    crate::common::until(what, || std::future::ready(check())).await
}

/// Waits until the bot posted a message containing `needle`.
pub async fn posted_with<R: Rig>(rig: &R, needle: &str) -> Posted {
    until(&format!("a message with {needle:?}"), || {
        rig.posted().into_iter().find(|p| p.text.contains(needle))
    })
    .await
}

/// Waits until message `id` was edited to something containing `needle`.
pub async fn edited_to<R: Rig>(rig: &R, id: &str, needle: &str) -> String {
    until(&format!("message {id} edited to {needle:?}"), || {
        rig.edited(id).filter(|t| t.contains(needle))
    })
    .await
}

/// Waits until a presser was told something starting with `start`.
pub async fn told<R: Rig>(rig: &R, start: &str) -> String {
    until(&format!("a notice {start:?}"), || {
        rig.notices().into_iter().find(|n| n.starts_with(start))
    })
    .await
}

fn terminal(command: &str) -> Reply {
    let args = serde_json::json!({ "command": command }).to_string();
    Reply::Json(calls(&[("c1", "terminal", &args)]))
}

pub async fn replies_go_to_the_thread<R: Rig>() {
    let rig = R::start(vec![Reply::Json(text("In the thread."))]).await;
    let thread = rig.say_in_thread(Person::Owner, "summarise").await;
    let answer = posted_with(&rig, "In the thread.").await;
    assert_eq!(answer.thread.as_deref(), Some(thread.as_str()));
    rig.stop().await;
}

pub async fn long_replies_are_split_within_the_limit<R: Rig>() {
    let words: Vec<String> = (0..R::LIMIT * 3 / 8).map(|i| format!("w{i}")).collect();
    let paragraphs: Vec<String> = words.chunks(40).map(|c| c.join(" ")).collect();
    let rig = R::start(vec![Reply::Json(text(&paragraphs.join("\n\n")))]).await;
    rig.say(Person::Owner, "write a lot").await;
    let all = until("every word of the answer", || {
        let all = rig.posted();
        let last = words.last()?;
        all.iter()
            .any(|p| p.text.contains(last.as_str()))
            .then_some(all)
    })
    .await;
    assert!(all.len() > 1, "split into several messages");
    for p in &all {
        assert!(p.text.chars().count() <= R::LIMIT, "{} chars", p.text.len());
    }
    let arrived: Vec<&str> = all
        .iter()
        .flat_map(|p| p.text.split_whitespace())
        .filter(|w| w.starts_with('w'))
        .collect();
    assert_eq!(arrived, words, "every word once, in order");
    rig.stop().await;
}

pub async fn approvals_round_trip_and_strangers_are_refused<R: Rig>() {
    let rig = R::start(vec![
        terminal("git reset --hard"),
        Reply::Json(text("Reset done.")),
    ])
    .await;
    rig.say_in_thread(Person::Owner, "reset it").await;
    let prompt = until("an approval prompt", || {
        rig.posted().into_iter().find(|p| p.buttons.len() == 4)
    })
    .await;
    assert!(prompt.text.contains("git reset --hard"), "{}", prompt.text);
    let once = prompt.buttons[0].clone();
    assert!(once.ends_with(":once"));
    rig.press(Person::Other, &prompt, &once).await;
    told(&rig, "Only the person who asked").await;
    assert!(
        rig.edited(&prompt.id).is_none(),
        "a refused press decides nothing"
    );
    rig.press(Person::Owner, &prompt, &once).await;
    edited_to(&rig, &prompt.id, "Allowed once").await;
    posted_with(&rig, "Reset done.").await;
    rig.press(Person::Owner, &prompt, &once).await;
    told(&rig, "This approval was already decided").await;
    rig.stop().await;
}

pub async fn a_prompt_left_open_is_closed_after_a_restart<R: Rig>() {
    let rig = R::start(vec![terminal("git reset --hard")]).await;
    rig.say_in_thread(Person::Owner, "reset it").await;
    let prompt = until("an approval prompt", || {
        rig.posted().into_iter().find(|p| p.buttons.len() == 4)
    })
    .await;
    // The prompt's message is stored just after it is shown; the restart
    // has to find it.
    crate::common::eventually("the prompt's message stored", || async {
        let stored = rig.store().pending_prompts(None).await.unwrap();
        stored.iter().any(|p| p.prompt_message.is_some())
    })
    .await;
    let rig = rig.restart().await;
    edited_to(&rig, &prompt.id, "restarted").await;
    rig.press(Person::Owner, &prompt, &prompt.buttons[0]).await;
    told(&rig, "This approval has expired").await;
    rig.stop().await;
}

pub async fn a_busy_session_says_it_queued_the_message<R: Rig>() {
    let rig = R::start(vec![
        Reply::Delayed(
            Duration::from_millis(1500),
            Box::new(Reply::Json(text("first answer"))),
        ),
        Reply::Json(text("second answer")),
    ])
    .await;
    rig.say_in_thread(Person::Owner, "one").await;
    // The first turn has started before the second message arrives.
    until("the first model call", || {
        (!rig.llm().requests().is_empty()).then_some(())
    })
    .await;
    rig.say_in_thread(Person::Owner, "two").await;
    posted_with(&rig, "I'll get to this as soon as I finish").await;
    posted_with(&rig, "second answer").await;
    let texts: Vec<String> = rig.posted().into_iter().map(|p| p.text).collect();
    let first = texts
        .iter()
        .position(|t| t.contains("first answer"))
        .unwrap();
    let second = texts
        .iter()
        .position(|t| t.contains("second answer"))
        .unwrap();
    assert!(first < second, "{texts:?}");
    rig.stop().await;
}

pub async fn questions_are_answered_by_button_or_by_text<R: Rig>() {
    let rig = R::start(vec![
        Reply::Json(calls(&[(
            "q1",
            "clarify",
            r#"{"question":"Which region?","choices":["eu","us"]}"#,
        )])),
        Reply::Json(calls(&[(
            "q2",
            "clarify",
            r#"{"question":"Any deadline?"}"#,
        )])),
        Reply::Json(text("Deploying to eu by Friday.")),
    ])
    .await;
    rig.say_in_thread(Person::Owner, "deploy").await;
    let question = posted_with(&rig, "Which region?").await;
    assert_eq!(question.buttons.len(), 2);
    let eu = question.buttons[0].clone();
    rig.press(Person::Other, &question, &eu).await;
    told(&rig, "Only the person asked can answer.").await;
    rig.press(Person::Owner, &question, &eu).await;
    edited_to(&rig, &question.id, "→ eu").await;
    let second = posted_with(&rig, "Any deadline?").await;
    rig.say_in_thread(Person::Owner, "Friday").await;
    edited_to(&rig, &second.id, "→ Friday").await;
    posted_with(&rig, "Deploying to eu by Friday.").await;
    let asked = rig.llm().requests()[2]["messages"].to_string();
    assert!(asked.contains("eu") && asked.contains("Friday"), "{asked}");
    rig.stop().await;
}

/// The scenarios as tests for one platform's rig.
macro_rules! compliance {
    ($rig:ty) => {
        #[tokio::test]
        async fn replies_go_to_the_thread() {
            super::replies_go_to_the_thread::<$rig>().await;
        }

        #[tokio::test]
        async fn long_replies_are_split_within_the_limit() {
            super::long_replies_are_split_within_the_limit::<$rig>().await;
        }

        #[tokio::test]
        async fn approvals_round_trip_and_strangers_are_refused() {
            super::approvals_round_trip_and_strangers_are_refused::<$rig>().await;
        }

        #[tokio::test]
        async fn a_prompt_left_open_is_closed_after_a_restart() {
            super::a_prompt_left_open_is_closed_after_a_restart::<$rig>().await;
        }

        #[tokio::test]
        async fn a_busy_session_says_it_queued_the_message() {
            super::a_busy_session_says_it_queued_the_message::<$rig>().await;
        }

        #[tokio::test]
        async fn questions_are_answered_by_button_or_by_text() {
            super::questions_are_answered_by_button_or_by_text::<$rig>().await;
        }
    };
}
pub(crate) use compliance;
