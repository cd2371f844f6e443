//! The console's pages, rendered on the server. What they never show:
//! secrets (tokens, keys, the environment), raw webhook bodies (only the
//! prompt an event became, as the agent saw it).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Console;
use super::auth::Operator;
use super::charts::bars;
use crate::approvals::evaluate_bounded;
use crate::budgets::{Window, money, usage_in};
use crate::clock::{iso, utc};
use crate::store::{ApprovalStatus, StoreError, now_ms};

const CSS: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
header{background:#1f2d3d;color:#fff;padding:.5rem 1rem;display:flex;gap:1rem;align-items:center}
header a{color:#dfe8f2;text-decoration:none}header a.on{color:#fff;font-weight:600}
header form{margin-left:auto}main{padding:1rem;max-width:72rem}
h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.5rem}
table{border-collapse:collapse;width:100%;background:#fff}td,th{border:1px solid #dde1e6;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#eef1f4}code,pre{font:12px/1.4 ui-monospace,monospace}pre{white-space:pre-wrap;margin:0}
.ok{color:#1a7f37}.bad{color:#b42318}.warn{color:#9a6700}.said{background:#fff8c5;padding:.5rem;border:1px solid #d4a72c}
.card{background:#fff;border:1px solid #dde1e6;padding:.7rem;margin:.5rem 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(10rem,1fr));gap:.5rem}
.stat b{display:block;font-size:1.4rem}figure.chart{margin:.5rem 0;background:#fff;border:1px solid #dde1e6;padding:.5rem}
figure.chart{max-width:46rem}figure svg{width:100%;height:auto}button{cursor:pointer}form.inline{display:inline}
details{margin:.2rem 0}summary{cursor:pointer;color:#3b6ea5}
";

/// A flash line carried back after an action.
#[derive(serde::Deserialize, Default)]
pub(super) struct Said {
    said: Option<String>,
    q: Option<String>,
}

fn page(title: &str, at: &str, csrf: Option<&str>, body: Markup) -> Markup {
    let nav = [
        ("/", "Overview"),
        ("/approvals", "Approvals"),
        ("/sessions", "Sessions"),
        ("/deliveries", "Deliveries"),
        ("/jobs", "Jobs & usage"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — switchboard console" }
                link rel="icon" href="data:,";
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    strong { "switchboard" }
                    @if let Some(csrf) = csrf {
                        @for (href, name) in nav {
                            a href=(href) class=[(href == at).then_some("on")] { (name) }
                        }
                        form method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

fn said(s: &Said) -> Markup {
    html! { @if let Some(text) = &s.said { p.said role="status" { (text) } } }
}

fn failed(err: StoreError) -> Response {
    tracing::warn!(error = %err, "console page: storage failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        page(
            "Storage unavailable",
            "",
            None,
            html! { p.bad { "Storage did not answer: " (err) } },
        ),
    )
        .into_response()
}

/// The login page, with why the last try failed.
pub(super) fn login(why: Option<&str>) -> Markup {
    page(
        "Log in",
        "",
        None,
        html! {
            @if let Some(why) = why { p.bad role="alert" { (why) } }
            form.card method="post" action="/login" {
                label { "Console token " input type="password" name="token" autocomplete="current-password" required autofocus; }
                " " button type="submit" { "Log in" }
            }
        },
    )
}

/// The sum of a Prometheus counter over its labels.
fn counter(name: &str) -> u64 {
    crate::telemetry::metrics()
        .render()
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `GET /`.
pub(super) async fn overview(State(c): State<Console>, op: Operator) -> Response {
    match overview_body(&c).await {
        Ok(body) => page("Overview", "/", Some(&op.csrf), body).into_response(),
        Err(err) => failed(err),
    }
}

async fn overview_body(c: &Console) -> Result<Markup, StoreError> {
    let gw = &c.state;
    let mut health: Vec<(String, bool, String)> = gw
        .health
        .snapshot()
        .into_iter()
        .map(|(name, h)| (name, h.ready, h.detail))
        .collect();
    let storage = tokio::time::timeout(crate::store::PROBE_TIMEOUT, gw.store.ping()).await;
    health.insert(
        0,
        match storage {
            Ok(Ok(())) => ("storage".into(), true, "reachable".into()),
            Ok(Err(err)) => ("storage".into(), false, err.to_string()),
            Err(_) => ("storage".into(), false, "no answer".into()),
        },
    );
    let role = if gw.cluster.is_shared() {
        format!("replica {} of several on one database", gw.cluster.name())
    } else {
        "the only replica".to_string()
    };
    let now = now_ms();
    let hour_ago = (now - 3_600_000) / 60_000 * 60_000;
    let activity = gw.store.activity_per_minute(hour_ago).await?;
    let minutes: Vec<i64> = (1..=60).map(|i| hour_ago + i * 60_000).collect();
    let per = |pick: fn(&(i64, i64, i64)) -> i64| -> Vec<i64> {
        minutes
            .iter()
            .map(|m| activity.iter().find(|a| a.0 == *m).map_or(0, pick))
            .collect()
    };
    let (today, _) = crate::clock::day_bounds(now);
    let first_day = today - 13 * 86_400_000;
    let spend = gw.store.spend_per_day(first_day).await?;
    let days: Vec<i64> = (0..14).map(|i| first_day + i * 86_400_000).collect();
    let tokens: Vec<i64> = days
        .iter()
        .map(|d| spend.iter().find(|s| s.0 == *d).map_or(0, |s| s.1))
        .collect();
    let cost: i64 = spend.iter().map(|s| s.2).sum();
    let problems = crate::telemetry::recent_problems();
    let audits = gw.store.console_audits(10).await?;
    let day = |ms: i64| iso(ms)[..10].to_string();
    Ok(html! {
        div.grid {
            div.card.stat { "waiting events" b { (gw.sessions.pending()) } }
            div.card.stat { "active sessions" b { (gw.sessions.active_sessions()) } }
            div.card.stat { "events refused (since start)" b { (counter("switchboard_events_refused_total")) } }
            div.card.stat { "approvals waiting" b { (gw.broker.pending_count()) } }
        }
        p { "This daemon is " (role) "." }
        h2 { "Health" }
        table {
            tr { th { "component" } th { "state" } th { "detail" } }
            @for (name, ready, detail) in &health {
                tr {
                    td { (name) }
                    td class=(if *ready { "ok" } else { "bad" }) { (if *ready { "ready" } else { "not ready" }) }
                    td { (detail) }
                }
            }
        }
        h2 { "The last hour" }
        (bars("Turns per minute", &per(|a| a.1), "60 min ago", "now"))
        (bars("Messages delivered per minute", &per(|a| a.2), "60 min ago", "now"))
        h2 { "Token spend per day" }
        (bars(&format!("Tokens per day (cost over 14 days: {})", money(cost)), &tokens, &day(first_day), &day(today)))
        h2 { "Recent warnings and errors" }
        @if problems.is_empty() { p { "None since the daemon started." } }
        @else {
            table {
                tr { th { "when" } th { "level" } th { "where" } th { "what" } }
                @for p in problems.iter().take(20) {
                    tr {
                        td { (iso(p.at)) }
                        td class=(if p.level == "ERROR" { "bad" } else { "warn" }) { (p.level) }
                        td { code { (p.target) } }
                        td { (p.text) }
                    }
                }
            }
        }
        h2 { "Console actions" }
        table {
            tr { th { "when" } th { "action" } th { "on" } th { "outcome" } }
            @for a in &audits {
                tr { td { (iso(a.at)) } td { (a.action) } td { (a.target) } td { (a.outcome) } }
            }
        }
    })
}

/// `GET /approvals`.
pub(super) async fn approvals(
    State(c): State<Console>,
    op: Operator,
    Query(s): Query<Said>,
) -> Response {
    match approvals_body(&c, &op.csrf).await {
        Ok(body) => page(
            "Approvals",
            "/approvals",
            Some(&op.csrf),
            html! { (said(&s)) (body) },
        )
        .into_response(),
        Err(err) => failed(err),
    }
}

async fn approvals_body(c: &Console, csrf: &str) -> Result<Markup, StoreError> {
    let store = &c.state.store;
    let all = store.list_approvals(200).await?;
    let (pending, decided): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|r| r.status == ApprovalStatus::Pending);
    let allowlist: Vec<String> = store
        .allowlist()
        .await?
        .into_iter()
        .map(|e| e.pattern_key)
        .collect();
    let chain = store.verify_audit().await?;
    let prompts = store.pending_prompts(None).await?;
    let mut cards = Vec::new();
    for r in &pending {
        let grants = store
            .session_grants(&r.session_id, Some(&r.requester))
            .await?;
        let e = evaluate_bounded(&r.command, &allowlist, &grants).await;
        let asked_in = prompts
            .iter()
            .find(|p| p.id == r.id)
            .and_then(|p| {
                Some(format!(
                    "{}:{}",
                    p.prompt_platform.as_deref()?,
                    p.prompt_chat.as_deref()?
                ))
            })
            .unwrap_or_else(|| "the approver chat".into());
        cards.push(html! {
            div.card id=(format!("approval-{}", r.id)) {
                p {
                    "Asked by " b { (r.requester) } " in " code { (asked_in) }
                    " (" a href=(format!("/sessions/{}", r.session_id)) { "its session" } "), "
                    (iso(r.created_at)) "; expires " (iso(r.expires_at)) "."
                }
                pre { code { (r.command) } }
                p { "Normalised: " code { (e.detection.normalized) } }
                ul {
                    @for m in &e.detection.matches {
                        li { code { (m.key) } @if m.hard { " (hard block)" } ": " (m.description) " — in " code { (m.command) } }
                    }
                }
                form.inline method="post" action=(format!("/approvals/{}", r.id)) {
                    input type="hidden" name="csrf" value=(csrf);
                    button name="choice" value="once" { "Approve once" } " "
                    button name="choice" value="session" { "Approve for the session" } " "
                    button name="choice" value="always" { "Always approve" }
                }
                " "
                form.inline method="post" action=(format!("/approvals/{}", r.id)) {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="text" name="reason" placeholder="reason (optional)";
                    " " button name="choice" value="deny" { "Deny" }
                }
            }
        });
    }
    Ok(html! {
        p {
            "Audit trail: " (chain.rows) " rows, "
            @match chain.first_broken {
                None => span.ok { "hash chain intact" },
                Some(row) => span.bad { "hash chain broken at row " (row) },
            }
            "."
        }
        h2 { "Waiting (" (pending.len()) ")" }
        @if pending.is_empty() { p { "Nothing waits for a decision." } }
        @for card in cards { (card) }
        h2 { "Recently decided" }
        table {
            tr { th { "when" } th { "command" } th { "status" } th { "by" } th { "reason" } }
            @for r in decided.iter().take(20) {
                tr {
                    td { (iso(r.decided_at.unwrap_or(r.created_at))) }
                    td { code { (crate::render::clip(&r.command, 120)) } }
                    td { (r.status.as_str()) }
                    td { (r.approver.as_deref().unwrap_or("")) }
                    td { (r.reason.as_deref().unwrap_or("")) }
                }
            }
        }
    })
}

/// `GET /sessions[?q=words]`.
pub(super) async fn sessions(
    State(c): State<Console>,
    op: Operator,
    Query(s): Query<Said>,
) -> Response {
    let store = &c.state.store;
    let query = s.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    let body = match query {
        Some(q) => store.search_messages(q, None, 50).await.map(|hits| {
            html! {
                h2 { "Messages with “" (q) "”" }
                table {
                    tr { th { "when" } th { "session" } th { "role" } th { "text" } }
                    @for h in &hits {
                        tr {
                            td { (iso(h.created_at)) }
                            td { a href=(format!("/sessions/{}", h.session_id)) { (h.session_key) } }
                            td { (h.role) }
                            td { (crate::render::clip(&h.content, 300)) }
                        }
                    }
                }
            }
        }),
        None => store.list_sessions(100).await.map(|list| {
            html! {
                table {
                    tr { th { "last active" } th { "session" } th { "state" } }
                    @for s in &list {
                        tr {
                            td { (iso(s.last_active_at)) }
                            td { a href=(format!("/sessions/{}", s.id)) { (s.key) } }
                            td { (if s.ended_at.is_some() { "ended" } else { "open" }) }
                        }
                    }
                }
            }
        }),
    };
    match body {
        Ok(body) => page(
            "Sessions",
            "/sessions",
            Some(&op.csrf),
            html! {
                form method="get" action="/sessions" {
                    input type="search" name="q" value=[query] placeholder="words in any message";
                    " " button type="submit" { "Search" }
                }
                (body)
            },
        )
        .into_response(),
        Err(err) => failed(err),
    }
}

/// `GET /sessions/{id}`: the transcript, tool calls and results folded.
pub(super) async fn transcript(
    State(c): State<Console>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let store = &c.state.store;
    let session = match store.session(&id).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                page("No such session", "/sessions", Some(&op.csrf), html! {}),
            )
                .into_response();
        }
        Err(err) => return failed(err),
    };
    let messages = match store.messages(&id).await {
        Ok(m) => m,
        Err(err) => return failed(err),
    };
    let body = html! {
        p { code { (session.key) } ", since " (iso(session.created_at))
            @if let Some(end) = session.ended_at { ", ended " (iso(end)) } "." }
        @for m in &messages {
            div.card {
                @match (m.role.as_str(), &m.tool_calls) {
                    ("tool", _) => details {
                        summary { "result of " code { (m.name.as_deref().unwrap_or("a tool")) } " (" (m.content.len()) " bytes)" }
                        pre { (crate::render::clip(&m.content, 4000)) }
                    },
                    (role, Some(calls)) => {
                        b { (role) } " " small { (iso(m.created_at)) }
                        @if !m.content.is_empty() { pre { (m.content) } }
                        details {
                            summary { "tool calls" }
                            pre { (crate::render::clip(calls, 4000)) }
                        }
                    },
                    (role, None) => {
                        b { (role) } " " small { (iso(m.created_at)) }
                        pre { (m.content) }
                    },
                }
            }
        }
    };
    page("Session", "/sessions", Some(&op.csrf), body).into_response()
}

/// `GET /deliveries`: webhook deliveries and outbound messages.
pub(super) async fn deliveries(
    State(c): State<Console>,
    op: Operator,
    Query(s): Query<Said>,
) -> Response {
    let store = &c.state.store;
    let (hooks, outbox) = match (store.deliveries(50).await, store.outbox(100).await) {
        (Ok(h), Ok(o)) => (h, o),
        (Err(err), _) | (_, Err(err)) => return failed(err),
    };
    let csrf = &op.csrf;
    let body = html! {
        (said(&s))
        h2 { "Outbound messages" }
        table {
            tr { th { "#" } th { "updated" } th { "to" } th { "status" } th { "tries" } th { "last error" } th { "text" } th {} }
            @for o in &outbox {
                tr {
                    td { (o.id) }
                    td { (iso(o.updated_at)) }
                    td { (o.platform) ":" (o.chat_id) }
                    td class=(match o.status.as_str() { "sent" => "ok", "failed" => "bad", _ => "warn" }) {
                        (if o.status == "failed" { "gave up" } else { o.status.as_str() })
                    }
                    td { (o.attempts) }
                    td { (o.last_error.as_deref().unwrap_or("")) }
                    td { (crate::render::clip(&o.body, 120)) }
                    td {
                        @if o.status == "failed" {
                            form method="post" action=(format!("/outbox/{}/retry", o.id)) {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Retry" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Webhook answers" }
        table {
            tr { th { "#" } th { "updated" } th { "route" } th { "on" } th { "status" } th { "tries" } th { "last error" } }
            @for d in &hooks {
                tr {
                    td { (d.id) } td { (iso(d.updated_at)) } td { (d.route) } td { (d.entity) }
                    td { (d.status) } td { (d.attempts) } td { (d.last_error.as_deref().unwrap_or("")) }
                }
            }
        }
    };
    page("Deliveries", "/deliveries", Some(csrf), body).into_response()
}

/// `GET /jobs`: scheduled jobs and spend against the budgets.
pub(super) async fn jobs(State(c): State<Console>, op: Operator) -> Response {
    match jobs_body(&c).await {
        Ok(body) => page("Jobs & usage", "/jobs", Some(&op.csrf), body).into_response(),
        Err(err) => failed(err),
    }
}

async fn jobs_body(c: &Console) -> Result<Markup, StoreError> {
    let store = &c.state.store;
    let budgets = &c.state.config.budgets;
    let now = now_ms();
    let mut rows = Vec::new();
    for job in store.jobs().await? {
        let last = store.runs(Some(&job.id), 1).await?.into_iter().next();
        rows.push((job, last));
    }
    let spend = usage_in(store, budgets, Window::Day, now).await?;
    Ok(html! {
        h2 { "Scheduled jobs" }
        table {
            tr { th { "job" } th { "schedule" } th { "next run" } th { "last run" } th { "posts to" } }
            @for (job, last) in &rows {
                tr {
                    td { (job.name) br; small { (job.id) } }
                    td { code { (job.schedule) } " " (if job.timezone.is_empty() { "UTC" } else { &job.timezone }) }
                    td { @if job.paused != 0 { "paused" } @else { (job.next_at.map_or("none".into(), utc)) } }
                    td {
                        @match last {
                            Some(r) => {
                                (utc(r.slot_at)) ": "
                                span class=(if r.status == "succeeded" { "ok" } else { "bad" }) { (r.status) }
                                " / "
                                span class=(if r.delivery == "posted" { "ok" } else if r.delivery == "pending" { "warn" } else { "bad" }) { (r.delivery) }
                                @if let Some(d) = &r.detail { br; small { (d) } }
                            },
                            None => "not run yet",
                        }
                    }
                    td { (job.platform) ":" (job.chat_id) }
                }
            }
        }
        h2 { "Spend today (UTC)" }
        table {
            tr { th { "who" } th { "turns" } th { "tokens" } th { "cost" } th { "daily budget" } }
            @for (row, standing) in &spend {
                tr {
                    td { (row.level) " " (row.platform) ":" (row.id) }
                    td { (row.turns) }
                    td { (row.tokens) @if row.held_tokens > 0 { br; small { "+" (row.held_tokens) " held" } } }
                    td { (money(row.cost_micros)) @if row.held_micros > 0 { br; small { "+" (money(row.held_micros)) " held" } } }
                    td {
                        @match standing {
                            Some(s) => span class=(if s.share() >= 1.0 { "bad" } else if s.share() * 100.0 >= f64::from(budgets.warn_percent) { "warn" } else { "ok" }) {
                                (format!("{:.0}%", s.share() * 100.0)) ": " (s.describe())
                            },
                            None => "no cap",
                        }
                    }
                }
            }
        }
    })
}
