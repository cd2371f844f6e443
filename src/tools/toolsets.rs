//! Toolsets: named bundles of tools (`{description, tools, includes}`),
//! resolved recursively, and the platforms' presets (`gateway-<platform>`,
//! each described by its adapter) built on one core chassis; `gateway` is
//! their union. What a session sees is resolve(enabled) − resolve(disabled),
//! then the availability probes, then schema patching so no description
//! mentions a tool the session lacks.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use regex::Regex;
use serde_json::Value;

use super::registry::{Registry, ToolEntry};
use crate::platform::Preset;

/// A static toolset definition.
#[derive(Debug, Clone, Copy)]
pub struct ToolsetDef {
    /// Name.
    pub name: &'static str,
    /// What it is for.
    pub description: &'static str,
    /// Its own tools.
    pub tools: &'static [&'static str],
    /// Other toolsets it contains.
    pub includes: &'static [&'static str],
}

/// The tools every chat platform gets.
pub const CORE_TOOLS: &[&str] = &[
    "web_search",
    "web_extract",
    "terminal",
    "process",
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "vision_analyze",
    "clarify",
    "todo",
    "memory",
    "session_search",
    "send_message",
    "cronjob",
];

/// Every static toolset.
pub const TOOLSETS: &[ToolsetDef] = &[
    ToolsetDef {
        name: "web",
        description: "Web search and page extraction",
        tools: &["web_search", "web_extract"],
        includes: &[],
    },
    ToolsetDef {
        name: "terminal",
        description: "Shell commands and background processes",
        tools: &["terminal", "process"],
        includes: &[],
    },
    ToolsetDef {
        name: "file",
        description: "Read, write, patch and search workspace files",
        tools: &["read_file", "write_file", "patch", "search_files"],
        includes: &[],
    },
    ToolsetDef {
        name: "vision",
        description: "Image understanding",
        tools: &["vision_analyze"],
        includes: &[],
    },
    ToolsetDef {
        name: "clarify",
        description: "Ask the user a question",
        tools: &["clarify"],
        includes: &[],
    },
    ToolsetDef {
        name: "todo",
        description: "Per-session task list",
        tools: &["todo"],
        includes: &[],
    },
    ToolsetDef {
        name: "memory",
        description: "Persistent notes per user",
        tools: &["memory"],
        includes: &[],
    },
    ToolsetDef {
        name: "session_search",
        description: "Search past conversations",
        tools: &["session_search"],
        includes: &[],
    },
    ToolsetDef {
        name: "cron",
        description: "Scheduled jobs of the chat",
        tools: &["cronjob"],
        includes: &[],
    },
    ToolsetDef {
        name: "forge",
        description: "Read the pull request or CI run a webhook event names (its diff, files, log, discussion)",
        tools: &["forge_diff", "forge_file", "forge_ci_log", "forge_thread"],
        includes: &[],
    },
    ToolsetDef {
        name: "messaging",
        description: "Send messages to configured chats",
        tools: &["send_message"],
        includes: &[],
    },
    ToolsetDef {
        name: "core",
        description: "The chassis shared by every chat platform",
        tools: CORE_TOOLS,
        includes: &[],
    },
    ToolsetDef {
        name: "debugging",
        description: "Debugging: terminal, processes, web and files",
        tools: &["terminal", "process"],
        includes: &["web", "file"],
    },
    ToolsetDef {
        name: "safe",
        description: "No terminal and no file writes",
        tools: &["read_file", "search_files"],
        includes: &[
            "web",
            "vision",
            "clarify",
            "todo",
            "memory",
            "session_search",
        ],
    },
    ToolsetDef {
        name: "coding",
        description: "Working on code in the workspace",
        tools: &[],
        includes: &[
            "file",
            "terminal",
            "web",
            "todo",
            "memory",
            "session_search",
            "clarify",
        ],
    },
];

/// Toolset failures.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ToolsetError {
    /// No toolset of that name (after aliases).
    #[error("unknown toolset `{0}`")]
    Unknown(String),
}

type Resolved = Arc<BTreeSet<String>>;

/// Resolution against a registry, memoised per registry generation.
#[derive(Debug)]
pub struct Toolsets {
    registry: Arc<Registry>,
    defs: &'static [ToolsetDef],
    presets: Vec<(String, Preset)>,
    memo: Mutex<(u64, HashMap<String, Resolved>)>,
    views: Mutex<(u64, HashMap<String, Arc<SessionView>>)>,
}

/// The canonical name for an alias: `hermes-<p>` → `gateway-<p>`, legacy
/// `<x>_tools` → `<x>`.
pub fn canonical_name(name: &str) -> String {
    let name = name.trim();
    if let Some(platform) = name.strip_prefix("hermes-") {
        return format!("gateway-{platform}");
    }
    if let Some(base) = name.strip_suffix("_tools")
        && TOOLSETS.iter().any(|t| t.name == base)
    {
        return base.to_string();
    }
    name.to_string()
}

/// The name of `platform`'s preset.
pub fn preset_name(platform: &str) -> String {
    format!("{PRESET_PREFIX}{platform}")
}

/// Presets are named `gateway-<platform>`.
const PRESET_PREFIX: &str = "gateway-";
/// The union of every preset.
const ALL_PRESETS: &str = "gateway";

/// Whether `name` names a toolset without consulting a registry: static
/// toolsets, the presets of `platforms`, `gateway`, `all`/`*`, aliases,
/// and `mcp-<server>` for configured servers.
pub fn is_known_statically(name: &str, platforms: &[String], mcp_servers: &[String]) -> bool {
    let name = canonical_name(name);
    name == "all"
        || name == "*"
        || name == ALL_PRESETS
        || TOOLSETS.iter().any(|t| t.name == name)
        || name
            .strip_prefix(PRESET_PREFIX)
            .is_some_and(|p| platforms.iter().any(|known| known == p))
        || name
            .strip_prefix("mcp-")
            .is_some_and(|server| mcp_servers.iter().any(|s| s == server))
}

impl Toolsets {
    /// Resolution of the built-in [`TOOLSETS`] and the platforms'
    /// `presets` (by platform id) over `registry`.
    pub fn new(registry: Arc<Registry>, presets: Vec<(String, Preset)>) -> Self {
        let mut this = Self::with_definitions(registry, TOOLSETS);
        this.presets = presets
            .into_iter()
            .map(|(platform, preset)| (preset_name(&platform), preset))
            .collect();
        this
    }

    /// Resolution of other definitions (tests, embedders).
    pub fn with_definitions(registry: Arc<Registry>, defs: &'static [ToolsetDef]) -> Self {
        Self {
            registry,
            defs,
            presets: Vec::new(),
            memo: Mutex::new((u64::MAX, HashMap::new())),
            views: Mutex::new((u64::MAX, HashMap::new())),
        }
    }

    /// The registry resolved against.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Every toolset name: static ones and those tools registered under.
    pub fn names(&self) -> Vec<String> {
        let mut names: BTreeSet<String> = self.defs.iter().map(|t| t.name.to_string()).collect();
        if !self.presets.is_empty() {
            names.insert(ALL_PRESETS.to_string());
        }
        names.extend(self.presets.iter().map(|(name, _)| name.clone()));
        names.extend(self.registry.by_toolset().into_keys());
        names.into_iter().collect()
    }

    /// The sorted tool names of a toolset, includes expanded. Cycles and
    /// diamonds resolve each tool once; `all` / `*` is every toolset.
    pub fn resolve(&self, name: &str) -> Result<Resolved, ToolsetError> {
        let name = canonical_name(name);
        let generation = self.registry.generation();
        {
            let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            if memo.0 != generation {
                *memo = (generation, HashMap::new());
            }
            if let Some(hit) = memo.1.get(&name) {
                return Ok(hit.clone());
            }
        }
        let by_toolset = self.registry.by_toolset();
        let resolved = if name == "all" || name == "*" {
            let mut all = BTreeSet::new();
            for toolset in self.names() {
                resolve_into(
                    &self.catalogue(),
                    &toolset,
                    &by_toolset,
                    &mut BTreeSet::new(),
                    &mut all,
                )?;
            }
            all
        } else {
            let mut tools = BTreeSet::new();
            resolve_into(
                &self.catalogue(),
                &name,
                &by_toolset,
                &mut BTreeSet::new(),
                &mut tools,
            )?;
            tools
        };
        let resolved = Arc::new(resolved);
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if memo.0 == generation {
            memo.1.insert(name, resolved.clone());
        }
        Ok(resolved)
    }

    /// The static definitions, the presets and their union.
    fn catalogue(&self) -> Catalogue<'_> {
        Catalogue {
            defs: self.defs,
            presets: &self.presets,
        }
    }

    /// The description of toolset `name`, where it has one.
    pub fn description(&self, name: &str) -> Option<&str> {
        let name = canonical_name(name);
        if name == ALL_PRESETS {
            return Some("Union of every gateway preset");
        }
        self.defs
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.description)
            .or_else(|| {
                self.presets
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, p)| p.description)
            })
    }

    /// The union of several toolsets.
    pub fn resolve_all(&self, names: &[String]) -> Result<BTreeSet<String>, ToolsetError> {
        let mut out = BTreeSet::new();
        for name in names {
            out.extend(self.resolve(name)?.iter().cloned());
        }
        Ok(out)
    }

    /// The tools a session gets: resolve(enabled) − resolve(disabled),
    /// registered and available now, sorted by name.
    pub fn session_tools(
        &self,
        enabled: &[String],
        disabled: &[String],
    ) -> Result<Vec<Arc<ToolEntry>>, ToolsetError> {
        let on = self.resolve_all(enabled)?;
        let off = self.resolve_all(disabled)?;
        Ok(on
            .difference(&off)
            .filter_map(|name| self.registry.get(name))
            .filter(|entry| self.registry.availability(&entry.spec.name).is_available())
            .collect())
    }

    /// What a session's model sees: its tool names and their OpenAI
    /// function schemas, with every sentence that mentions a tool the
    /// session lacks removed. Memoised on the registry generation, the
    /// tools available now and their dynamic schemas.
    pub fn session_view(
        &self,
        enabled: &[String],
        disabled: &[String],
    ) -> Result<Arc<SessionView>, ToolsetError> {
        let tools = self.session_tools(enabled, disabled)?;
        let dynamic: Vec<(usize, Value)> = tools
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.tool.dynamic_parameters().map(|p| (i, p)))
            .collect();
        let mut key: String = tools.iter().map(|t| format!("{}\n", t.spec.name)).collect();
        for (i, params) in &dynamic {
            key.push_str(&format!("{i}={params}\n"));
        }
        let generation = self.registry.generation();
        {
            let mut memo = self.views.lock().unwrap_or_else(|e| e.into_inner());
            if memo.0 != generation {
                *memo = (generation, HashMap::new());
            }
            if let Some(view) = memo.1.get(&key) {
                return Ok(view.clone());
            }
        }
        let present: BTreeSet<&str> = tools.iter().map(|t| t.spec.name.as_str()).collect();
        let mut known: BTreeSet<String> = self.registry.names().into_iter().collect();
        known.extend(
            self.defs
                .iter()
                .flat_map(|t| t.tools.iter())
                .chain(self.presets.iter().flat_map(|(_, p)| p.tools.iter()))
                .map(|s| s.to_string()),
        );
        let absent: Vec<String> = known
            .into_iter()
            .filter(|name| !present.contains(name.as_str()))
            .collect();
        let mentions = mention_pattern(&absent);
        let schemas = tools
            .iter()
            .map(|entry| {
                let mut schema = serde_json::json!({
                    "type": "function",
                    "function": {
                        "name": entry.spec.name,
                        "description": entry.spec.description,
                        "parameters": entry.parameters().as_ref(),
                    }
                });
                if let Some(pattern) = &mentions {
                    strip_mentions(&mut schema, pattern);
                }
                schema
            })
            .collect();
        let view = Arc::new(SessionView::new(
            tools.iter().map(|t| t.spec.name.clone()).collect(),
            schemas,
        ));
        let mut memo = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if memo.0 == generation && memo.1.len() < MAX_VIEWS {
            memo.1.insert(key, view.clone());
        }
        Ok(view)
    }

    /// The schemas of [`Toolsets::session_view`].
    pub fn session_schemas(
        &self,
        enabled: &[String],
        disabled: &[String],
    ) -> Result<Vec<Value>, ToolsetError> {
        Ok(self.session_view(enabled, disabled)?.schemas.clone())
    }
}

/// Most memoised session views kept per generation.
const MAX_VIEWS: usize = 256;

/// The tools one session's model sees, shared by every request of its
/// turns.
#[derive(Debug)]
pub struct SessionView {
    /// Tool names, sorted.
    pub names: Vec<String>,
    /// Their OpenAI function schemas, patched.
    pub schemas: Vec<Value>,
    /// `schemas` as one JSON array, written once rather than per request.
    pub json: Box<serde_json::value::RawValue>,
    /// Roughly how many tokens the schemas take in a request.
    pub tokens: usize,
    /// The schemas as Anthropic's Messages API takes them, written by its
    /// client at the view's first request there.
    pub anthropic: std::sync::OnceLock<Box<serde_json::value::RawValue>>,
}

impl SessionView {
    /// The view of `names` with `schemas`.
    pub fn new(names: Vec<String>, schemas: Vec<Value>) -> Self {
        let json = serde_json::value::to_raw_value(&schemas).expect("JSON values always serialise");
        let tokens = json.get().len() / 4;
        Self {
            names,
            schemas,
            json,
            tokens,
            anthropic: std::sync::OnceLock::new(),
        }
    }
}

impl Default for SessionView {
    /// No tools.
    fn default() -> Self {
        Self::new(Vec::new(), Vec::new())
    }
}

/// What names resolve against.
struct Catalogue<'a> {
    defs: &'a [ToolsetDef],
    presets: &'a [(String, Preset)],
}

fn resolve_into(
    catalogue: &Catalogue<'_>,
    name: &str,
    by_toolset: &std::collections::BTreeMap<String, Vec<String>>,
    visited: &mut BTreeSet<String>,
    out: &mut BTreeSet<String>,
) -> Result<(), ToolsetError> {
    let name = canonical_name(name);
    if !visited.insert(name.clone()) {
        return Ok(());
    }
    let registered = by_toolset.get(&name);
    let platform_tools = name
        .strip_prefix(PRESET_PREFIX)
        .and_then(|platform| by_toolset.get(platform));
    let static_def = catalogue
        .defs
        .iter()
        .find(|t| t.name == name)
        .map(|t| (t.tools, t.includes));
    let preset = catalogue
        .presets
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| (p.tools, p.includes));
    if name == ALL_PRESETS && !catalogue.presets.is_empty() {
        for (preset, _) in catalogue.presets {
            resolve_into(catalogue, preset, by_toolset, visited, out)?;
        }
    } else if let Some((tools, includes)) = static_def.or(preset) {
        out.extend(tools.iter().map(|t| t.to_string()));
        for include in includes {
            resolve_into(catalogue, include, by_toolset, visited, out)?;
        }
    } else if registered.is_none() && platform_tools.is_some() {
        // An unlisted platform that registered tools: core + its own.
        resolve_into(catalogue, "core", by_toolset, visited, out)?;
    } else if registered.is_none() {
        return Err(ToolsetError::Unknown(name));
    }
    out.extend(registered.into_iter().flatten().cloned());
    out.extend(platform_tools.into_iter().flatten().cloned());
    Ok(())
}

fn mention_pattern(absent: &[String]) -> Option<Regex> {
    if absent.is_empty() {
        return None;
    }
    let alternatives: Vec<String> = absent.iter().map(|n| regex::escape(n)).collect();
    Regex::new(&format!(r"\b(?:{})\b", alternatives.join("|"))).ok()
}

/// Removes, from every `description` in a schema, the sentences matching
/// `pattern`.
fn strip_mentions(value: &mut Value, pattern: &Regex) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                match field {
                    Value::String(text) if key == "description" => {
                        *text = without_sentences(text, pattern);
                    }
                    other => strip_mentions(other, pattern),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| strip_mentions(i, pattern)),
        _ => {}
    }
}

fn without_sentences(text: &str, pattern: &Regex) -> String {
    if !pattern.is_match(text) {
        return text.to_string();
    }
    let mut kept = String::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, ch) in text.char_indices() {
        let ends = matches!(ch, '.' | '!' | '?' | '\n')
            && bytes
                .get(i + 1)
                .is_none_or(|next| next.is_ascii_whitespace());
        if ends || i + ch.len_utf8() == text.len() {
            let sentence = &text[start..i + ch.len_utf8()];
            if !pattern.is_match(sentence) {
                kept.push_str(sentence);
            }
            start = i + ch.len_utf8();
        }
    }
    kept.trim().to_string()
}
