//! What a command's exit status means, for the model: a bare `exit_code: 1`
//! reads as a failure, but `grep` says "no match" with it, `diff` "the
//! files differ", `test` "false". Known conventions get a one-line
//! explanation beside the code; a code that means what it says (0, or a
//! program's own failure) gets none.
//!
//! The program is the last simple command of the line (the one whose
//! status the shell returns, pipelines included), found by a light split
//! on `;`, `&&`, `||`, `|` and newlines, past variable assignments and
//! wrappers such as `sudo` or `env`. It only explains: nothing is decided
//! by it.

/// Wrappers whose status is the wrapped command's (past their options).
const WRAPPERS: &[&str] = &["sudo", "env", "command", "exec", "nice", "nohup", "time"];

/// A one-line explanation of exit status `code` of `command`, when a
/// convention gives it a meaning beyond "it failed".
pub fn explain(command: &str, code: i32) -> Option<String> {
    if code == 0 {
        return None;
    }
    // With pipefail a pipeline's status may be any of its commands'.
    if command.contains("pipefail") {
        return generic(code);
    }
    let words = last_command(command);
    let program = words.first().map(|w| base(w)).unwrap_or_default();
    // git's subcommand: its first word that is not an option.
    let git = (program == "git")
        .then(|| words.iter().skip(1).find(|w| !w.starts_with('-')).copied())
        .flatten();
    let said = match (program, code) {
        ("grep" | "egrep" | "fgrep" | "zgrep" | "rg" | "ag", 1) | ("git", 1)
            if program != "git" || git == Some("grep") =>
        {
            "no lines matched: not an error"
        }
        ("grep" | "egrep" | "fgrep" | "zgrep" | "rg", 2) => {
            "grep failed: a bad pattern or a file it could not read"
        }
        ("diff" | "cmp", 1) => "the inputs differ: not an error",
        ("diff" | "cmp", 2) => "diff failed: a missing or unreadable input",
        ("git", 1)
            if git == Some("diff")
                && words.iter().any(|w| *w == "--quiet" || *w == "--exit-code") =>
        {
            "there are differences: not an error"
        }
        ("test" | "[" | "[[", 1) => "the condition is false: not an error",
        ("find", 1) => "find went on, but some paths could not be read",
        ("curl", _) => return curl(code).map(str::to_string),
        ("timeout", 124) => "the command timed out (timeout's limit)",
        _ => return generic(code),
    };
    Some(said.to_string())
}

/// What a command killed by signal `signal` (no exit code) means.
pub fn explain_signal(signal: i32) -> String {
    match signal_name(signal) {
        Some((name, why)) => format!("killed by {name}: {why}"),
        None => format!("killed by signal {signal}"),
    }
}

/// The shell's own codes, and 128 + n for a command killed by signal n.
fn generic(code: i32) -> Option<String> {
    let said = match code {
        124 => "timed out (the code `timeout` gives)".to_string(),
        126 => "found but not executable (permission denied, or not a program)".to_string(),
        127 => "command not found (not installed, or not on PATH)".to_string(),
        129..=192 => return Some(explain_signal(code - 128)),
        _ => return None,
    };
    Some(said)
}

fn signal_name(signal: i32) -> Option<(&'static str, &'static str)> {
    Some(match signal {
        1 => ("SIGHUP", "its terminal or parent went away"),
        2 => ("SIGINT", "interrupted"),
        6 => ("SIGABRT", "it aborted itself (an assertion or a crash)"),
        9 => (
            "SIGKILL",
            "stopped by force: out of memory, a limit, or a kill",
        ),
        11 => ("SIGSEGV", "it crashed (invalid memory access)"),
        13 => (
            "SIGPIPE",
            "its reader went away (e.g. `| head`): usually harmless",
        ),
        15 => ("SIGTERM", "asked to stop"),
        24 => ("SIGXCPU", "its CPU time limit ran out"),
        25 => ("SIGXFSZ", "it wrote past the file size limit"),
        _ => return None,
    })
}

/// curl's documented codes that are worth a sentence.
fn curl(code: i32) -> Option<&'static str> {
    Some(match code {
        6 => "curl: could not resolve the host",
        7 => "curl: could not connect to the host",
        22 => "curl: the server answered with an HTTP error (400 or above, with -f)",
        28 => "curl: the operation timed out",
        35 => "curl: the TLS handshake failed",
        47 => "curl: too many redirects",
        52 => "curl: the server closed the connection without answering",
        56 => "curl: the connection broke while receiving data",
        60 => "curl: the server's certificate could not be verified",
        _ => return None,
    })
}

/// The words of the line's last simple command, past assignments and
/// wrappers (and a wrapper's options: `sudo -u x`, `timeout 5`).
fn last_command(line: &str) -> Vec<&str> {
    let last = commands(line)
        .into_iter()
        .map(str::trim)
        .rfind(|part| !part.is_empty())
        .unwrap_or_default();
    let mut words: Vec<&str> = last
        .split_whitespace()
        .map(|w| w.trim_matches(|c| matches!(c, '(' | ')' | '{' | '}')))
        .filter(|w| !w.is_empty())
        .collect();
    let mut at = 0;
    loop {
        match words.get(at) {
            Some(w) if is_assignment(w) => at += 1,
            Some(w) if WRAPPERS.contains(&base(w)) => {
                at += 1;
                while words
                    .get(at)
                    .is_some_and(|w| w.starts_with('-') || is_assignment(w))
                {
                    at += 1;
                }
            }
            _ => return words.split_off(at.min(words.len())),
        }
    }
}

/// `line` cut at the shell's separators (`;`, newlines, `|`, `||`, `&&`,
/// a trailing `&`) outside quotes; a redirection's `&` (`2>&1`, `&>`)
/// does not cut.
fn commands(line: &str) -> Vec<&str> {
    let bytes = line.as_bytes();
    let (mut parts, mut start, mut quote) = (Vec::new(), 0, None);
    for (i, &b) in bytes.iter().enumerate() {
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(b),
            (None, b';' | b'\n' | b'|') => {
                parts.push(&line[start..i]);
                start = i + 1;
            }
            (None, b'&') => {
                let redirect =
                    i > 0 && matches!(bytes[i - 1], b'>' | b'<') || bytes.get(i + 1) == Some(&b'>');
                if !redirect {
                    parts.push(&line[start..i]);
                    start = i + 1;
                }
            }
            _ => {}
        }
    }
    parts.push(&line[start..]);
    parts
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_are_explained_by_the_last_command() {
        let no_match = explain("cd src && grep -rn needle .", 1).unwrap();
        assert!(no_match.contains("no lines matched"), "{no_match}");
        assert!(
            explain("cat x | rg foo", 1)
                .unwrap()
                .contains("no lines matched")
        );
        assert!(explain("diff a b", 1).unwrap().contains("differ"));
        assert!(explain("[ -f x ]", 1).unwrap().contains("false"));
        assert!(
            explain("git diff --quiet", 1)
                .unwrap()
                .contains("differences")
        );
        assert!(
            explain("LANG=C sudo -E grep x y", 1)
                .unwrap()
                .contains("no lines")
        );
        assert!(
            explain("curl -sf http://x", 22)
                .unwrap()
                .contains("HTTP error")
        );
        assert!(
            explain("timeout 5 sleep 9", 124)
                .unwrap()
                .contains("timed out")
        );
        assert!(explain("nosuchprogram", 127).unwrap().contains("not found"));
        assert!(explain("./build.sh", 137).unwrap().contains("SIGKILL"));
        assert!(explain("yes | head -1", 141).unwrap().contains("SIGPIPE"));
        assert!(
            explain("grep 'a|b;c' f 2>&1", 1)
                .unwrap()
                .contains("no lines")
        );
        assert!(
            explain("make >/dev/null 2>&1 & grep x f", 1)
                .unwrap()
                .contains("no lines")
        );
    }

    #[test]
    fn a_plain_failure_needs_no_explanation() {
        assert_eq!(explain("grep x y", 0), None);
        assert_eq!(explain("cargo test", 101), None);
        assert_eq!(explain("grep x y; false", 1), None);
        assert_eq!(explain("make", 2), None);
        assert_eq!(explain("git status", 1), None);
        assert_eq!(explain("git commit -m 'fix grep usage'", 1), None);
        assert_eq!(explain("git pull --quiet", 1), None);
        assert_eq!(explain("set -o pipefail; make | grep x", 1), None);
        assert!(
            explain("git grep -n needle", 1)
                .unwrap()
                .contains("no lines")
        );
    }

    #[test]
    fn a_long_hostile_line_is_read_in_linear_time() {
        let line = format!("sudo {} grep x f", "-E ".repeat(200_000));
        let started = std::time::Instant::now();
        assert!(explain(&line, 1).unwrap().contains("no lines"));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
