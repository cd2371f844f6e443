//! Diffs as the forge tools show them and as inline comments anchor to
//! them: each file's unified patch read into numbered lines (new-file
//! numbers for context and added lines, old-file numbers for removed
//! ones), rendered with those numbers so the model names lines the forge
//! accepts, and the set of lines a review comment may sit on.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// Path at the head.
    pub path: String,
    /// Path at the base, when it was renamed.
    pub old_path: Option<String>,
    /// `added`, `modified`, `removed`, `renamed`, ….
    pub status: String,
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// The unified patch (hunks only); `None` for binary or very large
    /// files the forge does not show.
    pub patch: Option<String>,
}

/// What kind of file a changed path is, for the order a review reads
/// them in: source first, removals after, and last the files a reviewer
/// skims (lock files, vendored and generated code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Weight {
    /// Written by hand, added or changed.
    Source,
    /// Removed.
    Removed,
    /// A lock file.
    Lock,
    /// Vendored code.
    Vendored,
    /// Generated code.
    Generated,
}

impl Weight {
    /// What `file` is.
    pub fn of(file: &FileDiff) -> Self {
        let path = file.path.to_ascii_lowercase();
        let name = path.rsplit('/').next().unwrap_or(&path);
        const LOCKS: [&str; 11] = [
            "cargo.lock",
            "package-lock.json",
            "npm-shrinkwrap.json",
            "yarn.lock",
            "pnpm-lock.yaml",
            "poetry.lock",
            "pipfile.lock",
            "gemfile.lock",
            "composer.lock",
            "go.sum",
            "flake.lock",
        ];
        let under = |dirs: &[&str]| {
            path.split('/')
                .rev()
                .skip(1)
                .any(|segment| dirs.contains(&segment))
        };
        if LOCKS.contains(&name) {
            Self::Lock
        } else if under(&["vendor", "third_party", "third-party", "node_modules"]) {
            Self::Vendored
        } else if [
            ".min.js",
            ".min.css",
            ".pb.go",
            "_pb2.py",
            ".g.dart",
            ".designer.cs",
        ]
        .iter()
        .any(|s| name.ends_with(s))
            || name.contains(".generated.")
            || name.contains("_generated.")
            || under(&["generated", "__generated__"])
        {
            Self::Generated
        } else if file.status == "removed" || file.status == "deleted" {
            Self::Removed
        } else {
            Self::Source
        }
    }

    /// Whether a review may leave `file` out by default: a lock file the
    /// change modified (one it adds or renames is read like code, and
    /// vendored or generated code, named by its path alone, is read last
    /// but read).
    pub fn skimmed(file: &FileDiff) -> bool {
        Self::of(file) == Self::Lock && file.status == "modified"
    }

    /// What it is, in a few words.
    pub fn said(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Removed => "removed",
            Self::Lock => "lock file",
            Self::Vendored => "vendored",
            Self::Generated => "generated",
        }
    }
}

/// Which version of the file a line is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Side {
    /// The base (a removed line).
    Left,
    /// The head (an added or unchanged line).
    Right,
}

impl Side {
    /// GitHub's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Left => "LEFT",
            Self::Right => "RIGHT",
        }
    }
}

/// One line of a patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// `+`, `-`, ` ` or `@` (a hunk header).
    pub kind: char,
    /// Its number in the base.
    pub old: Option<u64>,
    /// Its number in the head.
    pub new: Option<u64>,
    /// Its text, without the marker.
    pub text: &'a str,
}

fn hunk_start(header: &str, marker: char) -> Option<u64> {
    let at = header.find(marker)?;
    let digits: String = header[at + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The numbered lines of `patch`.
pub fn lines(patch: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    for raw in patch.lines() {
        if let Some(header) = raw.strip_prefix("@@") {
            old = hunk_start(header, '-').unwrap_or(1);
            new = hunk_start(header, '+').unwrap_or(1);
            out.push(Line {
                kind: '@',
                old: None,
                new: None,
                text: raw,
            });
            continue;
        }
        let (kind, text) = match raw.chars().next() {
            Some('+') => ('+', &raw[1..]),
            Some('-') => ('-', &raw[1..]),
            Some('\\') => continue,
            Some(' ') => (' ', &raw[1..]),
            _ => (' ', raw),
        };
        let line = match kind {
            '+' => {
                new += 1;
                Line {
                    kind,
                    old: None,
                    new: Some(new - 1),
                    text,
                }
            }
            '-' => {
                old += 1;
                Line {
                    kind,
                    old: Some(old - 1),
                    new: None,
                    text,
                }
            }
            _ => {
                old += 1;
                new += 1;
                Line {
                    kind,
                    old: Some(old - 1),
                    new: Some(new - 1),
                    text,
                }
            }
        };
        out.push(line);
    }
    out
}

/// The lines of `patch` a review comment may sit on, with their text:
/// added and unchanged lines on the right, removed and unchanged ones on
/// the left.
pub fn commentable(patch: &str) -> HashMap<(Side, u64), String> {
    let mut out = HashMap::new();
    for line in lines(patch) {
        if let Some(n) = line.new {
            out.insert((Side::Right, n), line.text.to_string());
        }
        if let Some(n) = line.old
            && line.kind != '+'
        {
            out.insert((Side::Left, n), line.text.to_string());
        }
    }
    out
}

/// `patch` with each line's number: `+   12 | text` for an added line
/// (head numbering), `-  L11 | text` for a removed one (base numbering),
/// `    13 | text` for context.
pub fn numbered(patch: &str) -> String {
    let mut out = String::with_capacity(patch.len() + patch.len() / 4);
    for line in lines(patch) {
        match line.kind {
            '@' => out.push_str(line.text),
            '-' => out.push_str(&format!(
                "- {:>6} | {}",
                format!("L{}", line.old.unwrap_or(0)),
                line.text
            )),
            kind => out.push_str(&format!(
                "{kind} {:>6} | {}",
                line.new.unwrap_or(0),
                line.text
            )),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "@@ -1,4 +1,5 @@ fn main() {\n fn main() {\n-    println!(\"hi\");\n+    let name = \"you\";\n+    println!(\"hi {name}\");\n }\n@@ -20,2 +21,2 @@\n-old\n+new\n\\ No newline at end of file\n";

    #[test]
    fn lines_carry_base_and_head_numbers() {
        let l = lines(PATCH);
        assert_eq!(l[1].new, Some(1));
        assert_eq!((l[2].kind, l[2].old, l[2].new), ('-', Some(2), None));
        assert_eq!((l[3].kind, l[3].new), ('+', Some(2)));
        assert_eq!((l[4].kind, l[4].new), ('+', Some(3)));
        assert_eq!((l[5].old, l[5].new), (Some(3), Some(4)));
        assert_eq!((l[7].old, l[8].new), (Some(20), Some(21)));
        assert_eq!(l.len(), 9, "the no-newline marker is no line");
    }

    #[test]
    fn comments_anchor_only_to_lines_in_the_diff() {
        let ok = commentable(PATCH);
        assert_eq!(
            ok.get(&(Side::Right, 3)).map(String::as_str),
            Some("    println!(\"hi {name}\");")
        );
        assert!(ok.contains_key(&(Side::Left, 2)));
        assert!(!ok.contains_key(&(Side::Left, 21)));
        assert!(!ok.contains_key(&(Side::Right, 10)), "between hunks");
    }

    #[test]
    fn numbered_patches_show_the_numbers_to_comment_on() {
        let text = numbered(PATCH);
        assert!(
            text.contains("+      3 |     println!(\"hi {name}\");"),
            "{text}"
        );
        assert!(text.contains("-     L2 |     println!(\"hi\");"), "{text}");
    }
}
