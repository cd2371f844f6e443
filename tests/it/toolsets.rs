//! Toolsets (SPEC §2.2): resolution, presets, aliases, memoisation, the
//! per-session list and schema patching.

use std::collections::BTreeSet;

use crate::common::tools::runtime;
use std::sync::Arc;

use regex::Regex;
use serde_json::{Value, json};
use switchboard::adapters::webhook::WEBHOOK_TOOLS;
use switchboard::tools::toolsets::{CORE_TOOLS, ToolsetDef};
use switchboard::tools::{
    RegisterMode, Registry, Tool, ToolContext, ToolError, ToolSpec, ToolsetError, Toolsets,
};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

struct Plain(&'static str, &'static str, &'static str);

#[async_trait::async_trait]
impl Tool for Plain {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.0,
            self.1,
            self.2,
            json!({"type": "object", "properties": {}}),
        )
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        Ok(String::new())
    }
}

#[test]
fn includes_expand_recursively() {
    let rt = runtime();
    let debugging = rt.toolsets.resolve("debugging").unwrap();
    assert_eq!(
        *debugging,
        set(&[
            "patch",
            "process",
            "read_file",
            "search_files",
            "terminal",
            "web_extract",
            "web_search",
            "write_file"
        ])
    );
}

#[test]
fn webhook_preset_is_exactly_the_four_read_only_tools() {
    let rt = runtime();
    assert_eq!(
        *rt.toolsets.resolve("gateway-webhook").unwrap(),
        set(WEBHOOK_TOOLS)
    );
    assert_eq!(WEBHOOK_TOOLS.len(), 4);
    for forbidden in [
        "terminal",
        "process",
        "write_file",
        "patch",
        "send_message",
        "memory",
    ] {
        assert!(
            !rt.toolsets
                .resolve("gateway-webhook")
                .unwrap()
                .contains(forbidden)
        );
    }
}

#[test]
fn platform_presets_are_core_and_gateway_is_their_union() {
    let rt = runtime();
    for p in [
        "gateway-telegram",
        "gateway-discord",
        "gateway-slack",
        "gateway-cli",
    ] {
        assert_eq!(*rt.toolsets.resolve(p).unwrap(), set(CORE_TOOLS), "{p}");
    }
    let mut union = BTreeSet::new();
    for p in [
        "gateway-telegram",
        "gateway-discord",
        "gateway-slack",
        "gateway-cli",
        "gateway-webhook",
    ] {
        union.extend(rt.toolsets.resolve(p).unwrap().iter().cloned());
    }
    assert_eq!(*rt.toolsets.resolve("gateway").unwrap(), union);
}

#[test]
fn safe_has_no_terminal_and_no_file_writes() {
    let rt = runtime();
    let safe = rt.toolsets.resolve("safe").unwrap();
    for tool in ["terminal", "process", "write_file", "patch"] {
        assert!(!safe.contains(tool), "{tool}");
    }
    assert!(safe.contains("read_file") && safe.contains("web_search"));
    let coding = rt.toolsets.resolve("coding").unwrap();
    assert!(coding.contains("terminal") && coding.contains("patch"));
}

#[test]
fn aliases_resolve_like_their_targets() {
    let rt = runtime();
    assert_eq!(
        rt.toolsets.resolve("hermes-telegram").unwrap(),
        rt.toolsets.resolve("gateway-telegram").unwrap()
    );
    assert_eq!(
        *rt.toolsets.resolve("web_tools").unwrap(),
        set(&["web_extract", "web_search"])
    );
    assert_eq!(
        *rt.toolsets.resolve("terminal_tools").unwrap(),
        set(&["process", "terminal"])
    );
    assert_eq!(
        rt.toolsets.resolve("*").unwrap(),
        rt.toolsets.resolve("all").unwrap()
    );
}

#[test]
fn unknown_names_are_errors_not_empty_sets() {
    let rt = runtime();
    assert_eq!(
        rt.toolsets.resolve("nope"),
        Err(ToolsetError::Unknown("nope".into()))
    );
    assert!(rt.toolsets.resolve("gateway-matrix").is_err());
    assert!(
        rt.toolsets
            .session_tools(&["web".into(), "typo".into()], &[])
            .is_err()
    );
}

#[test]
fn unlisted_platform_with_registered_tools_gets_core_plus_its_tools() {
    let rt = runtime();
    rt.registry
        .register(
            Arc::new(Plain("matrix_react", "matrix", "React to a message")),
            RegisterMode::Normal,
        )
        .unwrap();
    let mut expected = set(CORE_TOOLS);
    expected.insert("matrix_react".into());
    assert_eq!(*rt.toolsets.resolve("gateway-matrix").unwrap(), expected);
    assert_eq!(*rt.toolsets.resolve("hermes-matrix").unwrap(), expected);
}

#[test]
fn new_toolsets_join_all_and_memo_follows_the_generation() {
    let rt = runtime();
    let before = rt.toolsets.resolve("all").unwrap();
    let again = rt.toolsets.resolve("all").unwrap();
    assert!(Arc::ptr_eq(&before, &again), "memoised within a generation");
    rt.registry
        .register(
            Arc::new(Plain("lookup", "mcp-kb", "Look something up")),
            RegisterMode::Normal,
        )
        .unwrap();
    let after = rt.toolsets.resolve("all").unwrap();
    assert!(after.contains("lookup"));
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(*rt.toolsets.resolve("mcp-kb").unwrap(), set(&["lookup"]));
}

static CYCLIC: &[ToolsetDef] = &[
    ToolsetDef {
        name: "a",
        description: "",
        tools: &["t1"],
        includes: &["b", "c"],
    },
    ToolsetDef {
        name: "b",
        description: "",
        tools: &["t2"],
        includes: &["d", "a"],
    },
    ToolsetDef {
        name: "c",
        description: "",
        tools: &["t3"],
        includes: &["d"],
    },
    ToolsetDef {
        name: "d",
        description: "",
        tools: &["t4"],
        includes: &["b"],
    },
    ToolsetDef {
        name: "broken",
        description: "",
        tools: &[],
        includes: &["missing"],
    },
];

#[test]
fn cycles_and_diamonds_resolve_each_tool_once() {
    let toolsets = Toolsets::with_definitions(Arc::new(Registry::new()), CYCLIC);
    assert_eq!(
        *toolsets.resolve("a").unwrap(),
        set(&["t1", "t2", "t3", "t4"])
    );
    assert_eq!(
        *toolsets.resolve("d").unwrap(),
        set(&["t1", "t2", "t3", "t4"])
    );
    assert_eq!(
        toolsets.resolve("broken"),
        Err(ToolsetError::Unknown("missing".into()))
    );
}

#[test]
fn session_tools_subtract_disabled_and_drop_unavailable() {
    let rt = runtime();
    let tools: Vec<String> = rt
        .toolsets
        .session_tools(&["coding".into()], &["terminal".into()])
        .unwrap()
        .iter()
        .map(|e| e.spec.name.clone())
        .collect();
    assert!(!tools.contains(&"terminal".to_string()) && !tools.contains(&"process".to_string()));
    assert!(tools.contains(&"patch".to_string()));
    assert!(
        !tools.contains(&"web_search".to_string()),
        "unavailable without a backend"
    );
}

#[test]
fn no_schema_mentions_a_tool_the_session_lacks() {
    let rt = runtime();
    rt.registry
        .register(
            Arc::new(Plain(
                "notes",
                "notes",
                "Keep notes. For shell work use terminal instead. Notes persist.",
            )),
            RegisterMode::Normal,
        )
        .unwrap();
    let schemas = rt.toolsets.session_schemas(&["notes".into()], &[]).unwrap();
    assert_eq!(
        schemas[0]["function"]["description"],
        "Keep notes. Notes persist."
    );

    let all_names = rt.registry.names();
    for preset in [
        "gateway-webhook",
        "gateway-telegram",
        "safe",
        "coding",
        "debugging",
        "web",
        "file",
    ] {
        let schemas = rt
            .toolsets
            .session_schemas(&[preset.to_string()], &["terminal".into()])
            .unwrap();
        let present: Vec<&str> = schemas
            .iter()
            .map(|s| s["function"]["name"].as_str().unwrap())
            .collect();
        for absent in all_names.iter().filter(|n| !present.contains(&n.as_str())) {
            let word = Regex::new(&format!(r"\b{}\b", regex::escape(absent))).unwrap();
            for schema in &schemas {
                let text = schema.to_string();
                assert!(
                    !word.is_match(&text),
                    "{preset}: {} mentions absent {absent}",
                    schema["function"]["name"]
                );
            }
        }
    }
}
