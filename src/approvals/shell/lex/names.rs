//! What a line assigns, as far as it is known before it runs: literal
//! assignments made for the rest of the line, and the names whose value is
//! a guess (set in a branch, a loop or a pipeline, twice, by `read`, `declare
//! -n`, `eval`…), which no later use resolves.

use super::{Lexer, is_assignment};

/// How many compound commands the leading keywords of `words` open and
/// close (`{`, `if`, `while`, `until`, `for`, `select`, `case`; `}`, `fi`,
/// `done`, `esac`).
pub(super) fn compounds(words: &[String]) -> (usize, usize) {
    let (mut opened, mut closed) = (0, 0);
    for word in words {
        match word.as_str() {
            "{" | "if" | "while" | "until" | "for" | "select" | "case" => opened += 1,
            "}" | "fi" | "done" | "esac" => closed += 1,
            "!" | "then" | "do" | "else" | "elif" | "time" | "-p" => {}
            _ => break,
        }
    }
    (opened, closed)
}

/// Builtins whose arguments are assignments that last for the line.
fn declares(word: &str) -> bool {
    matches!(
        word,
        "export" | "declare" | "local" | "readonly" | "typeset"
    )
}

impl Lexer<'_> {
    /// Records the literal assignments of `words` (a simple command just
    /// ended); those that `perhaps` happen make their names unknown.
    pub(super) fn remember(&mut self, words: &[String], perhaps: bool) {
        let Some(first) = words.first() else {
            return;
        };
        // A value that holds a command substitution, quoted or not, runs
        // it where bash evaluates it later (`y='a[$(…)]'; echo $((y))`).
        for word in words.iter().filter(|w| is_assignment(w)) {
            if let Some((_, value)) = word.split_once('=')
                && (value.contains("$(") || value.contains('`'))
            {
                self.out.nested.push(value.to_string());
            }
        }
        // `alias f=…`: a name the line defines runs what it was given.
        if first == "alias" {
            self.defined.extend(
                words[1..]
                    .iter()
                    .filter_map(|w| w.split_once('=').map(|(name, _)| name.to_string())),
            );
        }
        let names = || words[1..].iter().filter(|w| !w.starts_with(['-', '+']));
        match first.as_str() {
            "unset" => {
                for name in names().cloned().collect::<Vec<_>>() {
                    self.vars.remove(&name);
                    if perhaps {
                        self.unknown.insert(name);
                    } else {
                        self.unknown.remove(&name);
                    }
                }
                return;
            }
            // Names set by what a command reads or computes.
            "read" | "mapfile" | "readarray" | "getopts" | "printf" | "let" => {
                let set: Vec<String> = names()
                    .map(|w| w.split(['=', '+', '[']).next().unwrap_or(w).to_string())
                    .collect();
                self.unknown.extend(set);
                return;
            }
            // A script of its own may set any name.
            "eval" | "source" | "." => {
                let known: Vec<String> = self.vars.drain().map(|(name, _)| name).collect();
                self.unknown.extend(known);
                return;
            }
            _ => {}
        }
        // `declare -l p`, `declare -n p=q`: what the name reads is not
        // what was assigned.
        let attributes = declares(first) && words[1..].iter().any(|w| w.starts_with(['-', '+']));
        if attributes {
            let set: Vec<String> = names()
                .map(|w| w.split('=').next().unwrap_or(w).to_string())
                .collect();
            self.unknown.extend(set);
            return;
        }
        let assignments: &[String] = match words.first() {
            Some(first) if declares(first) => &words[1..],
            _ if words.iter().all(|w| is_assignment(w)) => words,
            _ => return,
        };
        for assignment in assignments.iter().filter(|w| is_assignment(w)) {
            let Some((name, value)) = assignment.split_once('=') else {
                continue;
            };
            // One that may not happen, that appends, or that gives a name
            // a second value (which of them a later use reads is a guess,
            // and `"p"=ls` is no assignment to bash) leaves it unknown.
            let appends = name.ends_with('+');
            let name = name.strip_suffix('+').unwrap_or(name);
            let again = self.vars.get(name).is_some_and(|old| old != value);
            if perhaps || appends || again || self.unknown.contains(name) {
                self.vars.remove(name);
                self.unknown.insert(name.to_string());
            } else {
                self.vars.insert(name.to_string(), value.to_string());
            }
        }
    }
}
