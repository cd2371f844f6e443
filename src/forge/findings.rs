//! A review as the model writes it: prose (the summary) and, in a fenced
//! `findings` block, the findings to anchor on diff lines. Findings are
//! checked against the diff (a line the forge would refuse goes into the
//! summary instead) and fingerprinted, so the same finding on the same
//! code is posted once however often the pull request is reviewed.

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::diff::Side;

/// The format the model is asked for, shown in the review prompt.
pub const FORMAT: &str = "End your review with the findings to anchor on diff lines, as a fenced \
block tagged `findings` holding a JSON array, for example:\n\
```findings\n\
[{\"path\": \"src/lib.rs\", \"line\": 42, \"side\": \"RIGHT\", \"severity\": \"blocking\", \"body\": \"What is wrong and how to fix it.\"}]\n\
```\n\
`line` is the number forge_diff shows (an `L` number is a removed line: give it without the L and side LEFT). \
`severity` is `blocking` (must be fixed before merging), `warning` or `note`. Write `[]` when there is nothing to anchor.";

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing.
    Note,
    /// Should be looked at.
    Warning,
    /// Must be fixed before merging.
    Blocking,
}

impl Severity {
    fn parse(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "blocking" | "blocker" | "critical" | "error" | "failure" | "high" => Self::Blocking,
            "warning" | "warn" | "medium" | "major" => Self::Warning,
            _ => Self::Note,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Blocking => "blocking",
        }
    }
}

/// One finding on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// File path at the head.
    pub path: String,
    /// Line number on `side`.
    pub line: u64,
    /// Which version the line is in.
    pub side: Side,
    /// How much it matters.
    pub severity: Severity,
    /// What to say.
    pub body: String,
}

#[derive(Deserialize)]
struct Raw {
    path: Option<String>,
    #[serde(alias = "file")]
    file: Option<String>,
    line: Option<Value>,
    side: Option<String>,
    severity: Option<String>,
    #[serde(alias = "comment", alias = "message")]
    body: Option<String>,
}

fn finding(raw: Raw) -> Option<Finding> {
    let path = raw
        .path
        .or(raw.file)?
        .trim()
        .trim_start_matches("./")
        .to_string();
    let line = match raw.line? {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.trim().trim_start_matches(['L', 'R']).parse().ok()?,
        _ => return None,
    };
    let body = raw.body?.trim().to_string();
    if path.is_empty() || line == 0 || body.is_empty() {
        return None;
    }
    let side = match raw.side.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("LEFT" | "OLD" | "BASE") => Side::Left,
        _ => Side::Right,
    };
    Some(Finding {
        path,
        line,
        side,
        severity: Severity::parse(raw.severity.as_deref().unwrap_or("")),
        body: crate::render::clip(&body, 4000),
    })
}

/// The findings in `block`'s JSON (an array, or an object with a
/// `findings` array); `None` when it is not such JSON.
fn parse_block(block: &str) -> Option<Vec<Finding>> {
    let value: Value = serde_json::from_str(block.trim()).ok()?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut map) => match map.remove("findings")? {
            Value::Array(items) => items,
            _ => return None,
        },
        _ => return None,
    };
    Some(
        items
            .into_iter()
            .filter_map(|v| serde_json::from_value::<Raw>(v).ok())
            .filter_map(finding)
            .collect(),
    )
}

/// Splits a review into its summary and its findings: the last fenced
/// block tagged `findings` (or a `json` block holding findings) is taken
/// out of the text and read; `None` when there is no such block (the
/// review did not say what it found: it failed, or ignored the format).
pub fn split(answer: &str) -> (String, Option<Vec<Finding>>) {
    let mut taken: Option<(usize, usize, Vec<Finding>)> = None;
    let mut search = 0;
    while let Some(open) = answer[search..].find("```").map(|i| i + search) {
        let tag_end = answer[open..].find('\n').map_or(answer.len(), |i| i + open);
        let tag = answer[open + 3..tag_end].trim().to_ascii_lowercase();
        let body_start = (tag_end + 1).min(answer.len());
        let Some(close) = answer[body_start..].find("```").map(|i| i + body_start) else {
            break;
        };
        let end = close + 3;
        if (tag == "findings" || tag == "json")
            && let Some(found) = parse_block(&answer[body_start..close])
        {
            taken = Some((open, end, found));
        }
        search = end;
    }
    match taken {
        Some((start, end, found)) => {
            let summary = format!("{}{}", &answer[..start], &answer[end..]);
            (summary.trim().to_string(), Some(found))
        }
        None => (answer.trim().to_string(), None),
    }
}

/// What makes a finding the same one again: its file, side, the text of
/// the line it is on (so it survives lines moving) and what it says
/// (case and spacing aside).
pub fn fingerprint(finding: &Finding, line_text: &str) -> String {
    let said: String = finding
        .body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let mut hash = Sha256::new();
    for part in [
        finding.path.as_str(),
        finding.side.as_str(),
        line_text.trim(),
        said.as_str(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hex::encode(&hash.finalize()[..16])
}

/// A short hash of a line's text (trimmed), carried in a line comment's
/// key: a forge that does not say when a comment went outdated (GitLab)
/// is asked whether its line still reads the same.
pub fn line_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.trim().as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_findings_block_is_taken_out_of_the_summary() {
        let answer = "Looks fine overall.\n\n```rust\nlet x = 1;\n```\n\n```findings\n[{\"path\": \"./src/a.rs\", \"line\": 12, \"severity\": \"blocking\", \"body\": \"Unchecked index.\"},\
            {\"path\": \"b.rs\", \"line\": \"L3\", \"side\": \"left\", \"body\": \"Removed guard.\"},\
            {\"path\": \"c.rs\", \"body\": \"no line\"}]\n```\nThanks.";
        let (summary, found) = split(answer);
        let found = found.unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].path, "src/a.rs");
        assert_eq!(found[0].severity, Severity::Blocking);
        assert_eq!((found[1].line, found[1].side), (3, Side::Left));
        assert!(summary.contains("let x = 1;"), "other code blocks stay");
        assert!(summary.ends_with("Thanks."));
        assert!(!summary.contains("findings"));
    }

    #[test]
    fn an_answer_without_findings_is_all_summary() {
        let (summary, found) = split("Nothing to add.\n```json\n{\"a\": 1}\n```");
        assert_eq!(found, None);
        assert!(summary.contains("{\"a\": 1}"));
        let (_, found) = split("```findings\n{\"findings\": []}\n```");
        assert_eq!(found, Some(Vec::new()));
    }

    #[test]
    fn fingerprints_ignore_spacing_and_line_moves() {
        let a = Finding {
            path: "a.rs".into(),
            line: 10,
            side: Side::Right,
            severity: Severity::Note,
            body: "Use  checked_add here.".into(),
        };
        let b = Finding {
            line: 14,
            body: "use checked_add here.".into(),
            ..a.clone()
        };
        assert_eq!(fingerprint(&a, "  x + y "), fingerprint(&b, "x + y"));
        assert_ne!(fingerprint(&a, "x + y"), fingerprint(&a, "x - y"));
    }
}
