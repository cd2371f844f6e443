//! Fuzzing on stable Rust: proptest generates hostile inputs for every
//! parser that reads what arrives from outside (platform payloads, webhook
//! deliveries and their templates, Markdown from the model, shell commands,
//! configuration) and checks that none panics or takes long. Inputs are real
//! payload shapes mutated field by field (values retyped, removed, nested,
//! replaced by hostile strings) and raw text.
//!
//! CI runs [`ci_cases`] inputs per target. The long campaign is
//! `SWITCHBOARD_FUZZ_CASES=20000 cargo test --test it fuzz::campaign -- --ignored --nocapture`
//! (every target, that many inputs each); it prints the inputs tried.

mod parsers;
mod routes;

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value};

/// Longest an input may take (a debug build, on a busy machine): enough
/// for a 100 000-character text, short enough to catch anything quadratic
/// on it.
const PER_INPUT: Duration = Duration::from_secs(3);

/// Inputs per target in an ordinary test run.
pub fn ci_cases() -> u32 {
    std::env::var("SWITCHBOARD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Runs `check` on `cases` inputs from `strategy`; fails with the smallest
/// input that panics, fails `check`, or takes longer than [`PER_INPUT`].
/// Returns the number of inputs tried.
pub fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> u64 {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    });
    if let Err(failure) = runner.run(&strategy, |input| {
        let started = Instant::now();
        check(input)?;
        let took = started.elapsed();
        prop_assert!(took < PER_INPUT, "{name}: one input took {took:?}");
        Ok(())
    }) {
        panic!("fuzz target {name}: {failure:?}");
    }
    println!("fuzz {name}: {cases} inputs");
    u64::from(cases)
}

/// A GitHub delivery payload from `tests/data/github`.
pub fn github_fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("tests/data/github/{name}.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Text as hostile as the platforms let through: control characters and
/// NUL, bidi overrides, combining marks, emoji, Markdown and template
/// syntax, shell metacharacters, long runs, and arbitrary Unicode.
pub fn nasty_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "\u{0}",
        "\u{202e}",
        "\u{200b}",
        "\u{feff}",
        "e\u{301}\u{301}\u{301}",
        "👩\u{200d}👩\u{200d}👧",
        "\r\n",
        "\t",
        "```",
        "`",
        "**",
        "__",
        "~~",
        "||",
        "> ",
        "# ",
        "- ",
        "1. ",
        "[a](b)",
        "[a](javascript:x)",
        "<@U123>",
        "<@!123>",
        "<#C1|x>",
        "@everyone",
        "<script>",
        "&amp;",
        "{",
        "}",
        "{{",
        "}}",
        "{pull_request.title}",
        "{a.b.c.d.e.f}",
        "$(",
        "${IFS}",
        "`id`",
        "'",
        "\"",
        "\\",
        ";",
        "|",
        "&&",
        "\n",
        " ",
        "/approve ",
        "/deny ",
        "!approve ",
        "=",
        "[[",
        "]]",
    ]);
    prop_oneof![
        4 => prop::collection::vec(pieces.prop_map(str::to_string), 0..24).prop_map(|v| v.concat()),
        3 => any::<String>(),
        2 => "[ -~\n]{0,200}",
        1 => (prop::sample::select(vec!['a', '*', '`', '\n', '{', ' ', 'é', '😀', '\u{0}']), 1usize..70_000)
            .prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
}

/// A JSON value to put where a field was: every type, edge numbers, and
/// hostile text.
pub fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        prop::num::f64::NORMAL.prop_map(Value::from),
        Just(Value::from(0)),
        Just(Value::from(-1)),
        nasty_text().prop_map(Value::String),
        Just(Value::Array(vec![])),
        Just(Value::Object(Map::new())),
        prop::collection::vec(nasty_text().prop_map(Value::String), 0..4).prop_map(Value::Array),
    ]
}

/// One change to a JSON document; the numbers pick a node by position.
#[derive(Debug, Clone)]
pub enum Mutation {
    Replace(usize, Value),
    Remove(usize),
    Insert(usize, String, Value),
    Nest(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let key = prop_oneof![
        nasty_text(),
        prop::sample::select(vec![
            "type",
            "text",
            "user",
            "id",
            "ts",
            "thread_ts",
            "channel",
            "event",
            "message",
            "from",
            "chat",
            "reply_to_message",
            "entities",
            "action",
            "number",
            "body",
            "title",
            "author",
            "guild_id",
            "content",
            "mentions",
            "payload",
            "actions",
            "value",
        ])
        .prop_map(str::to_string),
    ];
    prop_oneof![
        4 => (any::<usize>(), json_leaf()).prop_map(|(at, v)| Mutation::Replace(at, v)),
        2 => any::<usize>().prop_map(Mutation::Remove),
        2 => (any::<usize>(), key, json_leaf()).prop_map(|(at, k, v)| Mutation::Insert(at, k, v)),
        1 => (any::<usize>(), 1u8..160).prop_map(|(at, depth)| Mutation::Nest(at, depth)),
    ]
}

/// `sample` with up to eight mutations applied.
pub fn mutated(sample: Value) -> impl Strategy<Value = Value> {
    prop::collection::vec(mutation(), 0..8).prop_map(move |changes| {
        let mut doc = sample.clone();
        for change in changes {
            apply(&mut doc, change);
        }
        doc
    })
}

/// Every node's JSON pointer, the root first.
fn pointers(doc: &Value) -> Vec<String> {
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    walk(child, format!("{at}/{key}"), out);
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    walk(child, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(doc, String::new(), &mut out);
    out
}

fn apply(doc: &mut Value, change: Mutation) {
    let all = pointers(doc);
    let pick = |at: usize| all[at % all.len()].clone();
    match change {
        Mutation::Replace(at, value) => {
            if let Some(node) = doc.pointer_mut(&pick(at)) {
                *node = value;
            }
        }
        Mutation::Remove(at) => {
            let pointer = pick(at);
            let Some((parent, last)) = pointer.rsplit_once('/') else {
                return;
            };
            let key = last.replace("~1", "/").replace("~0", "~");
            match doc.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.remove(&key);
                }
                Some(Value::Array(a)) => {
                    if let Ok(i) = key.parse::<usize>()
                        && i < a.len()
                    {
                        a.remove(i);
                    }
                }
                _ => {}
            }
        }
        Mutation::Insert(at, key, value) => match doc.pointer_mut(&pick(at)) {
            Some(Value::Object(m)) => {
                m.insert(key, value);
            }
            Some(Value::Array(a)) => a.push(value),
            _ => {}
        },
        Mutation::Nest(at, depth) => {
            if let Some(node) = doc.pointer_mut(&pick(at)) {
                let mut nested = node.take();
                for level in 0..depth {
                    nested = if level % 2 == 0 {
                        Value::Array(vec![nested])
                    } else {
                        Value::Object(Map::from_iter([("x".to_string(), nested)]))
                    };
                }
                *node = nested;
            }
        }
    }
}

/// Raw bytes near `doc`'s serialisation: cut short, bytes flipped, or
/// left whole.
pub fn mangled_bytes(doc: Value) -> impl Strategy<Value = Vec<u8>> {
    let bytes = serde_json::to_vec(&doc).unwrap();
    let len = bytes.len().max(1);
    prop_oneof![
        6 => Just(bytes.clone()),
        1 => (0..len).prop_map({
            let bytes = bytes.clone();
            move |cut| bytes[..cut.min(bytes.len())].to_vec()
        }),
        1 => prop::collection::vec((0..len, any::<u8>()), 1..6).prop_map(move |flips| {
            let mut b = bytes.clone();
            for (i, byte) in flips {
                if let Some(slot) = b.get_mut(i) {
                    *slot = byte;
                }
            }
            b
        }),
    ]
}

/// Every target, `SWITCHBOARD_FUZZ_CASES` (default 20 000) inputs each.
#[test]
#[ignore = "a long campaign; run on purpose"]
fn campaign() {
    let cases = std::env::var("SWITCHBOARD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let started = Instant::now();
    let tried = parsers::all(cases) + routes::all(cases);
    println!(
        "fuzz campaign: {tried} inputs in {:.0?}, no panic, none over {PER_INPUT:?}",
        started.elapsed()
    );
}
