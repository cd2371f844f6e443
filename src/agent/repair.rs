//! Repairing tool names models get slightly wrong: `Read-File`,
//! `functions.read_file`, `ReadFile`, `read_file_tool`, `raed_file`.

/// The smallest similarity accepted by the fuzzy match.
const FUZZY_THRESHOLD: f64 = 0.7;

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.extend(c.to_lowercase());
            prev_lower = false;
        } else {
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            out.push(c);
        }
    }
    out
}

/// The valid tool name `raw` most likely means, if any. Rules in order:
/// exact; junk trimmed (spaces, quotes, backticks, `()`, a `functions.`
/// prefix); CamelCase to snake_case; lowercase with `-` and spaces as `_`;
/// a `_tool` suffix removed; then the closest name with a similarity of at
/// least 0.7.
pub fn repair(raw: &str, valid: &[String]) -> Option<String> {
    let known = |candidate: &str| valid.iter().find(|v| v.as_str() == candidate).cloned();
    if let Some(hit) = known(raw) {
        return Some(hit);
    }
    let trimmed = raw
        .trim()
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '.' | ':' | ','))
        .trim_end_matches("()")
        .trim();
    let trimmed = trimmed
        .rsplit_once('.')
        .filter(|(prefix, _)| matches!(*prefix, "functions" | "tools" | "function"))
        .map_or(trimmed, |(_, rest)| rest);
    let snake = snake_case(trimmed);
    let normalized: String = snake
        .to_lowercase()
        .chars()
        .map(|c| {
            if c == '-' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect::<String>()
        .split('_')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("_");
    let candidates = [
        trimmed.to_string(),
        normalized.clone(),
        normalized.trim_end_matches("_tool").to_string(),
    ];
    if let Some(hit) = candidates.iter().find_map(|c| known(c)) {
        return Some(hit);
    }
    let target = normalized.trim_end_matches("_tool");
    let mut best: Option<(f64, &String)> = None;
    for name in valid {
        let score = strsim::normalized_damerau_levenshtein(target, name);
        if score >= FUZZY_THRESHOLD && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, name));
        }
    }
    best.map(|(_, name)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::repair;

    fn names() -> Vec<String> {
        [
            "read_file",
            "write_file",
            "terminal",
            "web_search",
            "search_files",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    #[test]
    fn repairs_common_mistakes() {
        for (raw, want) in [
            ("read_file", "read_file"),
            ("Read-File", "read_file"),
            ("ReadFile", "read_file"),
            ("read file", "read_file"),
            (" `read_file` ", "read_file"),
            ("functions.read_file", "read_file"),
            ("read_file()", "read_file"),
            ("terminal_tool", "terminal"),
            ("WEB_SEARCH", "web_search"),
            ("raed_file", "read_file"),
            ("websearch", "web_search"),
        ] {
            assert_eq!(repair(raw, &names()).as_deref(), Some(want), "{raw}");
        }
    }

    #[test]
    fn gives_up_on_strangers() {
        for raw in ["delete_everything", "x", "", "send_email"] {
            assert_eq!(repair(raw, &names()), None, "{raw}");
        }
    }
}
