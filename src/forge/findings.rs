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
`severity` is `blocking` (must be fixed before merging), `warning` or `note`. \
When the fix is small and certain, add `suggestion`: the exact new text of the lines the finding is on \
(`start_line` to `line`, both `+` or context lines of the diff; without `start_line`, `line` alone), \
which the author can apply with one click. Write `[]` when there is nothing to anchor.";

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
    /// The first line of a finding on several lines (before `line`).
    pub start_line: Option<u64>,
    /// The replacement of the lines it is on (`start_line` to `line`),
    /// for the author to apply.
    pub suggestion: Option<String>,
}

impl Finding {
    /// The first line it is on.
    pub fn first_line(&self) -> u64 {
        self.start_line.unwrap_or(self.line)
    }
}

/// A fence opening a forge's suggestion block (GitHub's, GitLab's).
static SUGGESTION_FENCE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)([`~]{3,}[ \t]*)suggestion").expect("suggestion fence pattern compiles")
});

/// The longest replacement a suggestion may carry.
const SUGGESTION_CHARS: usize = 8000;

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
    start_line: Option<Value>,
    #[serde(alias = "replacement", alias = "fix")]
    suggestion: Option<String>,
}

/// A line number as the model writes it (`12`, `"12"`, `"L12"`).
fn line_number(value: Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().trim_start_matches(['L', 'R']).parse().ok(),
        _ => None,
    }
}

fn finding(raw: Raw) -> Option<Finding> {
    let path = super::settings::normal(raw.path.or(raw.file)?.trim());
    let line = line_number(raw.line?)?;
    let start_line = raw
        .start_line
        .and_then(line_number)
        .filter(|&start| start > 0 && start < line);
    // A suggestion is the `suggestion` field's alone, checked against the
    // lines it replaces: one written into the text is shown as code.
    let body = SUGGESTION_FENCE
        .replace_all(raw.body?.trim(), "${1}text")
        .into_owned();
    if path.is_empty() || line == 0 || body.is_empty() {
        return None;
    }
    let side = match raw.side.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("LEFT" | "OLD" | "BASE") => Side::Left,
        _ => Side::Right,
    };
    // A replacement is the lines' new text: one trailing newline is the
    // last line's end, not an empty line to add.
    let suggestion = raw
        .suggestion
        .map(|s| s.strip_suffix('\n').map(str::to_string).unwrap_or(s))
        .filter(|s| s.chars().count() <= SUGGESTION_CHARS);
    Some(Finding {
        path,
        line,
        side,
        severity: Severity::parse(raw.severity.as_deref().unwrap_or("")),
        body: crate::render::clip(&body, 4000),
        start_line,
        suggestion,
    })
}

/// `block` as JSON, forgiving what weak models get wrong most: a comma
/// before a closing bracket.
fn lenient_json(block: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(block.trim()).or_else(|err| {
        let mut fixed = String::with_capacity(block.len());
        let (mut in_string, mut escaped) = (false, false);
        let chars: Vec<char> = block.trim().chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            if in_string {
                in_string = escaped || c != '"';
                escaped = !escaped && c == '\\';
            } else if c == '"' {
                in_string = true;
            } else if c == ','
                && chars[i + 1..]
                    .iter()
                    .find(|c| !c.is_whitespace())
                    .is_some_and(|c| matches!(c, ']' | '}'))
            {
                continue;
            }
            fixed.push(c);
        }
        serde_json::from_str(&fixed).map_err(|_| err)
    })
}

/// Why `answer` holds no readable findings block (see [`split`]): the
/// words the model is asked again with.
pub fn check(answer: &str) -> Result<(), String> {
    if split(answer).1.is_some() {
        return Ok(());
    }
    let tagged = fences_tagged(answer, "findings");
    Err(if !tagged {
        "the review does not end with a ```findings block".to_string()
    } else {
        let why = blocks(answer)
            .find(|b| b.tag == "findings")
            .map(|b| match lenient_json(b.body) {
                Err(err) => format!("it is not valid JSON ({err})"),
                Ok(_) => "it holds neither a JSON array of findings nor an object with a `findings` array".to_string(),
            })
            .unwrap_or_else(|| "it is not closed with ```".to_string());
        format!("the ```findings block could not be read: {why}")
    })
}

/// A fenced block of a text.
struct Block<'a> {
    /// Where its opening fence starts and its closing one ends.
    open: usize,
    end: usize,
    /// Its tag, lowercase.
    tag: String,
    body: &'a str,
}

/// Whether a fence of three backticks or more in `text` opens with
/// `tag` (one pass: a long run of backticks is walked once).
fn fences_tagged(text: &str, tag: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let start = i;
        while bytes.get(i) == Some(&b'`') {
            i += 1;
        }
        if i - start >= 3
            && text
                .get(i..i + tag.len())
                .is_some_and(|t| t.eq_ignore_ascii_case(tag))
        {
            return true;
        }
    }
    false
}

/// The fenced blocks of `text`, in order.
fn blocks(text: &str) -> impl Iterator<Item = Block<'_>> {
    let mut search = 0;
    std::iter::from_fn(move || {
        let open = text[search..].find("```").map(|i| i + search)?;
        let tag_end = text[open..].find('\n').map_or(text.len(), |i| i + open);
        let tag = text[open + 3..tag_end].trim().to_ascii_lowercase();
        let body_start = (tag_end + 1).min(text.len());
        let close = text[body_start..].find("```").map(|i| i + body_start)?;
        search = close + 3;
        Some(Block {
            open,
            end: close + 3,
            tag,
            body: &text[body_start..close],
        })
    })
}

/// The findings in `block`'s JSON (an array, or an object with a
/// `findings` array); `None` when it is not such JSON.
fn parse_block(block: &str) -> Option<Vec<Finding>> {
    let value: Value = lenient_json(block).ok()?;
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
    let taken = blocks(answer)
        .filter(|b| b.tag == "findings" || b.tag == "json")
        .filter_map(|b| parse_block(b.body).map(|found| (b.open, b.end, found)))
        .last();
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

/// Findings a review keeps at most, its answers merged.
pub const MERGED: usize = 200;

/// Words too common to tell one point from another.
const COMMON: &[&str] = &[
    "the", "this", "that", "these", "those", "here", "there", "and", "but", "for", "from", "with",
    "without", "into", "onto", "its", "are", "was", "were", "been", "being", "has", "have", "had",
    "not", "can", "could", "may", "might", "should", "would", "will", "when", "which", "what",
    "where", "who", "how", "any", "all", "some", "use", "used", "using", "than", "then", "also",
    "does", "did", "done", "too", "very", "just", "only", "more",
];

/// The words of `text` that carry its meaning: lower-case, three letters
/// or more, the common ones left out.
fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !COMMON.contains(&w.as_str()))
        .collect()
}

/// Whether two findings' texts make the same point, reworded at most:
/// at least three meaningful words each, four in five of them shared.
pub fn same_point(a: &str, b: &str) -> bool {
    let (a, b) = (words(a), words(b));
    let shared = a.intersection(&b).count();
    let all = a.union(&b).count();
    a.len().min(b.len()) >= 3 && shared * 5 >= all * 4
}

/// The severity a line comment of the bot's was posted with.
pub fn severity_in(comment: &str) -> Option<Severity> {
    let (said, _) = comment
        .trim_start()
        .strip_prefix("**")?
        .split_once("**: ")?;
    Some(Severity::parse(said))
}

/// What a line comment of the bot's says about the code: its text
/// without the severity, the suggested change and the marker.
pub fn said_in(comment: &str) -> &str {
    let text = comment
        .trim_start()
        .strip_prefix("**")
        .and_then(|rest| rest.split_once("**: "))
        .map_or(comment, |(_, said)| said);
    [
        "\n\n```",
        "\n\n~~~",
        "\n\n<!-- switchboard:",
        "\n\n_A suggested change",
    ]
    .iter()
    .filter_map(|cut| text.find(cut))
    .min()
    .map_or(text, |end| &text[..end])
}

/// Adds to `found` the findings of `more` (an earlier answer's) that do
/// not make a point already made near the same line, up to
/// [`MERGED`] in all.
pub fn merge(found: &mut Vec<Finding>, more: Vec<Finding>) {
    for f in more {
        if found.len() >= MERGED {
            return;
        }
        let made = found.iter().any(|g| {
            g.path == f.path
                && g.side == f.side
                && g.line.abs_diff(f.line) <= 3
                && same_point(&g.body, &f.body)
        });
        if !made {
            found.push(f);
        }
    }
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
    fn a_point_reworded_is_the_same_point() {
        assert!(same_point(
            "Unchecked index into `items` can panic on an empty list.",
            "The unchecked index into items may panic when the list is empty."
        ));
        assert!(!same_point(
            "Unchecked index into `items` can panic on an empty list.",
            "This query interpolates user input: SQL injection."
        ));
        assert!(!same_point("", "anything"));
        for (a, b) in [
            (
                "The error from `parse` is ignored here.",
                "The token from `verify` is ignored here.",
            ),
            ("User input is logged here.", "User input is executed here."),
            (
                "This function does not check the return value of the call.",
                "This function does not check the caller's permission before the call.",
            ),
        ] {
            assert!(!same_point(a, b), "{a} / {b}");
        }
        assert_eq!(severity_in("**blocking**: x"), Some(Severity::Blocking));
        assert_eq!(severity_in("plain"), None);
        let comment = "**blocking**: Unchecked index.\n\n```suggestion\nx.get(0)\n```\n\n<!-- switchboard:k -->";
        assert_eq!(said_in(comment), "Unchecked index.");
        assert_eq!(said_in("plain words"), "plain words");
        let at = |line, body: &str| Finding {
            path: "a.rs".into(),
            line,
            side: Side::Right,
            severity: Severity::Warning,
            body: body.into(),
            start_line: None,
            suggestion: None,
        };
        let mut found = vec![at(10, "Unchecked index into items can panic.")];
        merge(
            &mut found,
            vec![
                at(11, "unchecked index into ITEMS can panic"),
                at(40, "Leaks a file handle."),
            ],
        );
        assert_eq!(found.len(), 2, "{found:?}");
    }

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

    /// What weak models write instead of a findings block: never a
    /// panic, never findings made up; the few that are only sloppy are
    /// read, the rest say why not.
    #[test]
    fn malformed_findings_blocks_are_read_or_refused_with_a_reason() {
        let item = r#"{"path": "a.rs", "line": 3, "body": "x"}"#;
        let sloppy = [
            format!("ok\n```findings\n[{item},]\n```"),
            format!("ok\n```findings\n{{\"findings\": [{item}, ],}}\n```"),
            format!("ok\n```FINDINGS\n[{item}]\n```"),
        ];
        for answer in &sloppy {
            assert_eq!(check(answer), Ok(()), "{answer}");
            assert_eq!(split(answer).1.map(|f| f.len()), Some(1), "{answer}");
        }
        let broken = [
            ("", "does not end with"),
            ("Looks good to me.", "does not end with"),
            (
                "```findings\n[{'path': 'a.rs', 'line': 3}]\n```",
                "not valid JSON",
            ),
            (
                "```findings\n[{\"path\": \"a.rs\", \"line\": 3\n```",
                "not valid JSON",
            ),
            (
                "```findings\n{\"path\": \"a.rs\"}\n```",
                "neither a JSON array",
            ),
            ("```findings\n\"none\"\n```", "neither a JSON array"),
            ("```findings\n[{\"path\": \"a.rs\"", "not closed"),
            ("``````findings\n```", "could not be read"),
            ("```findings\n[1e999999, {\"line\": -1}, null]\n```", ""),
            (
                "```findings\n[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n```",
                "",
            ),
        ];
        for (answer, why) in broken {
            match check(answer) {
                Err(said) => assert!(said.contains(why), "{answer:?}: {said}"),
                // Valid JSON with nothing usable in it is an empty review.
                Ok(()) => assert_eq!(split(answer).1, Some(Vec::new()), "{answer:?}"),
            }
        }
        let deep = format!(
            "```findings\n{}{}\n```",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(check(&deep).is_err());
        let fences = "`".repeat(300_000);
        let started = std::time::Instant::now();
        assert!(check(&fences).is_err());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "linear"
        );
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
            start_line: None,
            suggestion: None,
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
