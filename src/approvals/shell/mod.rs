//! Shell-aware normalisation of a command line before pattern matching:
//! ANSI and control characters stripped, Unicode NFKC, quotes and escapes
//! removed (including `$'…'`), what can be resolved without running
//! anything resolved (`$IFS`, literal assignments, brace lists, `$(echo …)`:
//! see [`lex`]), `$HOME` folded to `~`, compound commands split (`;` `&&`
//! `||` `|` `&`, newlines), and the contents of `$(…)`, backticks, `(…)`,
//! `<(…)`, functions, aliases, `sh -c '…'`, `eval …`, `find -exec`,
//! `env -S`, here-strings into a shell and what git runs besides itself
//! (see [`git`]) analysed as commands of their own. Wrappers (`env`, `sudo`, `nice`, `timeout`, `xargs`, `flock`,
//! `parallel`…) are peeled off, absolute program paths reduced to their
//! names, and long options given by a prefix spelled out (see [`words`]).

mod braces;
mod git;
mod lex;
mod valued;
mod words;

pub use lex::Redirection;
pub use words::is_shell;

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

/// One simple command: its words as the shell would see them, before and
/// after the wrappers were peeled off. Its redirections, wherever they
/// were written (`</dev/null git push`, `sudo >x -u root rm`), are apart
/// from its words and follow them in its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Words with the wrappers still in front, then the redirections
    /// (`sudo -S rm -rf x > log`).
    pub raw: String,
    /// Words of the command itself, then the redirections (`rm -rf x >
    /// log`).
    pub command: String,
    /// The command's words, one each, without the redirections.
    pub words: Vec<String>,
    /// Its program as written, before its path was reduced to a name
    /// (`./x`, `/usr/bin/rm`); empty when it has none.
    pub program: String,
    /// Its redirections, in the order written.
    pub redirections: Vec<Redirection>,
    /// The texts its here-strings give it (a here-document's body is
    /// analysed as a script of its own).
    pub fed: Vec<String>,
    /// Its standard input is the pipe from the command before it.
    pub piped: bool,
}

/// The normalised view of a command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Normalized {
    /// Every simple command found, nested ones included.
    pub segments: Vec<Segment>,
    /// The top-level line, words and operators separated by single spaces.
    pub whole: String,
    /// Expansion (brace lists, variables, nesting) ran past the line's
    /// budget: what it would run is not known, so it cannot be judged.
    pub over_budget: bool,
}

static ANSI: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
        .expect("ansi pattern")
});

/// Text cleaned of terminal escapes, control and invisible characters, in
/// NFKC form.
pub fn clean(text: &str) -> String {
    let no_ansi = ANSI.replace_all(text, "");
    no_ansi
        .nfkc()
        .filter(|c| {
            !matches!(c, '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}')
                && (!c.is_control() || matches!(c, '\n' | '\t'))
        })
        .collect()
}

/// Deepest nesting of `$(…)`, `sh -c` and friends that is followed.
const MAX_DEPTH: usize = 8;

/// Normalises a command line.
pub fn normalize(command: &str) -> Normalized {
    let mut out = Normalized::default();
    // Each text with its depth, and whether its commands read a pipe (a
    // script run by a command that does: `… | git -c alias.x=!sh x`).
    let cleaned = clean(command);
    let mut queue = Vec::new();
    // Bash reads the text as written: where cleaning changed it (a
    // full-width `＃` became a comment, a quote or a delimiter's line, an
    // invisible character went), that text is analysed too.
    if cleaned != command {
        queue.push((command.to_string(), 0usize, false));
    }
    queue.push((cleaned, 0usize, false));
    let mut first = true;
    let mut budget = lex::Budget::new(lex::EXPANSION_BUDGET);
    // A script nested past MAX_DEPTH is not read, or where a here-document
    // ends is not known as bash knows it: the line cannot be judged.
    let mut unknowable = false;
    // Each command once, though both texts hold it.
    let mut seen: HashSet<(String, String)> = HashSet::new();
    while let Some((text, depth, reads_pipe)) = queue.pop() {
        let mut lexed = lex::lex(&text, &mut budget);
        unknowable |= lexed.unsure;
        if first {
            out.whole = lexed.whole.clone();
            first = false;
        }
        for segment in &mut lexed.segments {
            segment.piped |= reads_pipe;
        }
        for lex::Words {
            words,
            redirections,
            fed,
            piped,
        } in lexed.segments
        {
            // Each redirection that writes a file is written `>` or `>>`
            // (`>&file`, `<>file` write it too).
            let with_redirections = |words: &[String]| {
                let redirected = redirections.iter().flat_map(|r| {
                    let operator = match r.operator.as_str() {
                        ">>" | "&>>" if r.writes() => ">>",
                        _ if r.writes() => ">",
                        operator => operator,
                    };
                    [operator, r.target.as_str()]
                });
                let all: Vec<&str> = words.iter().map(String::as_str).chain(redirected).collect();
                all.join(" ")
            };
            let raw = with_redirections(&words);
            let mut command_words = words::peel(words);
            let program = command_words.first().cloned().unwrap_or_default();
            if let Some(first) = command_words.first_mut() {
                *first = words::program(first).to_string();
            }
            let command_words = words::spell_out(command_words);
            let scripts = words::inline_scripts(&command_words, &fed);
            if depth < MAX_DEPTH {
                queue.extend(scripts.into_iter().map(|script| (script, depth + 1, piped)));
            } else {
                unknowable |= !scripts.is_empty();
            }
            let command = with_redirections(&command_words);
            if !seen.insert((raw.clone(), command.clone())) {
                continue;
            }
            out.segments.push(Segment {
                raw,
                command,
                words: command_words,
                program,
                redirections,
                fed,
                piped,
            });
        }
        if depth < MAX_DEPTH {
            let fed = &lexed.fed_nested;
            queue.extend(
                lexed
                    .nested
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| (n, depth + 1, fed.contains(&i))),
            );
        } else {
            unknowable |= !lexed.nested.is_empty();
        }
    }
    out.over_budget = budget.exhausted() || unknowable;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(line: &str) -> Vec<String> {
        normalize(line)
            .segments
            .into_iter()
            .map(|s| s.command)
            .collect()
    }

    #[test]
    fn quotes_escapes_and_paths_are_removed() {
        assert_eq!(commands(r#"'r'"m" -r\f /tmp/x"#), ["rm -rf /tmp/x"]);
        assert_eq!(commands(r"/usr/bin/rm -rf build"), ["rm -rf build"]);
        assert_eq!(commands(r"$'\x72\x6d' -rf x"), ["rm -rf x"]);
        // Cleaned first; the text as written (what bash reads) after it.
        assert_eq!(
            commands("\u{ff52}\u{ff4d} -rf x"),
            ["rm -rf x", "\u{ff52}\u{ff4d} -rf x"]
        );
        assert_eq!(commands("r\u{200b}m -rf x")[0], "rm -rf x");
        assert_eq!(commands("\x1b[31mrm\x1b[0m -rf x\0")[0], "rm -rf x");
    }

    #[test]
    fn wrappers_are_peeled() {
        assert_eq!(
            commands("sudo -u root env FOO=1 nice -n 5 timeout -s KILL 10 rm -rf x"),
            ["rm -rf x"]
        );
        assert_eq!(
            commands("find . -name '*.o' | xargs -0 -n 5 rm -f"),
            ["find . -name *.o", "rm -f"]
        );
        assert_eq!(commands("LANG=C command rm x"), ["rm x"]);
    }

    #[test]
    fn compound_and_nested_commands_are_split() {
        let found = commands(
            "echo hi && ls; cat $(rm -rf ~) | grep x || `shutdown now` & sh -c 'mkfs /dev/sda'",
        );
        for want in [
            "echo hi",
            "ls",
            "rm -rf ~",
            "shutdown now",
            "mkfs /dev/sda",
            "grep x",
        ] {
            assert!(
                found.iter().any(|f| f == want),
                "{want} missing from {found:?}"
            );
        }
    }

    #[test]
    fn home_is_folded() {
        assert_eq!(
            commands("rm -rf $HOME/.ssh \"${HOME}\" /home/alice"),
            ["rm -rf ~/.ssh ~ ~"]
        );
    }

    #[test]
    fn redirections_follow_the_words_they_are_apart_from() {
        let n = normalize("echo x>/etc/passwd 2>&1");
        assert_eq!(n.segments[0].command, "echo x > /etc/passwd >& 1");
        let n = normalize("2>/dev/null sudo >x -u root /bin/rm -rf y");
        assert_eq!(n.segments[0].words, ["rm", "-rf", "y"]);
        assert_eq!(n.segments[0].program, "/bin/rm");
        assert_eq!(n.segments[0].command, "rm -rf y > /dev/null > x");
        assert_eq!(
            n.segments[0].raw,
            "sudo -u root /bin/rm -rf y > /dev/null > x"
        );
    }
}
