//! Redirections and here-documents: each redirection apart from the
//! command's words with its one target, wherever it is written; a
//! here-document's delimiter read as bash reads it and its body read from
//! the next line, a script of its own.

use super::{Lexer, name_len};

/// One redirection: its operator, without the descriptor number written
/// before it (`2>` is `>`, `{fd}<` is `<`), and its one target word
/// (a here-document's delimiter; empty when the line ended first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redirection {
    pub operator: String,
    pub target: String,
}

impl Redirection {
    /// Whether it opens its target for reading (`<`, `<>`, `<&`), not a
    /// here-document's or here-string's text.
    pub fn reads(&self) -> bool {
        self.operator.starts_with('<') && !self.here() && !self.duplicates()
    }

    /// Whether it opens its target for writing (`>`, `>>`, `>|`, `&>`,
    /// `&>>`, `<>`, `>&` with a file), not a descriptor it duplicates.
    pub fn writes(&self) -> bool {
        matches!(
            self.operator.as_str(),
            ">" | ">>" | ">|" | "&>" | "&>>" | "<>" | ">&"
        ) && !self.duplicates()
    }

    /// Whether it copies or closes a descriptor (`2>&1`, `<&3`, `>&-`).
    fn duplicates(&self) -> bool {
        self.operator.ends_with('&') && self.target.bytes().all(|b| b.is_ascii_digit() || b == b'-')
    }

    /// Whether its target is text given as standard input (`<<`, `<<-`,
    /// `<<<`).
    pub fn here(&self) -> bool {
        self.operator.starts_with("<<")
    }
}

/// A here-document whose body is still to be read.
pub(super) struct Heredoc {
    /// The line that ends it.
    pub(super) delimiter: String,
    /// `<<-`: leading tabs are taken off its lines.
    pub(super) strip_tabs: bool,
    /// Its delimiter was quoted: the body is not expanded.
    pub(super) literal: bool,
    /// The index of the simple command it feeds, on the line being lexed
    /// (none inside a nested construct, whose text is lexed again).
    pub(super) segment: Option<usize>,
}

impl Lexer<'_> {
    /// The target word of a redirection `operator` has been read: a
    /// here-string's text is what it feeds the command.
    pub(super) fn target(&mut self, operator: String, word: String) {
        let target = match operator.as_str() {
            "<<<" => {
                self.fed.push(word.clone());
                word
            }
            // Blanks an expansion left around a file's name are no part
            // of it (`>$IFS/etc/x` writes `/etc/x`).
            _ if !self.quoted && !word.trim().is_empty() => {
                super::super::words::fold_home(word.trim())
            }
            _ => super::super::words::fold_home(&word),
        };
        self.tokens.push(target.clone());
        self.redirections.push(Redirection { operator, target });
    }

    /// A redirection's operator: its target is the next word.
    pub(super) fn open(&mut self, operator: String) {
        self.close();
        self.tokens.push(operator.clone());
        self.pending = Some(operator);
    }

    /// A redirection left without a target (`echo x >` at the end).
    pub(super) fn close(&mut self) {
        if let Some(operator) = self.pending.take() {
            self.redirections.push(Redirection {
                operator,
                target: String::new(),
            });
        }
    }

    /// Reads a here-document's delimiter word as bash does: its quotes
    /// removed, nothing expanded. Returns it, whether any of it was
    /// quoted, and the text read.
    pub(super) fn delimiter(&mut self) -> (String, bool, String) {
        let mut written = String::new();
        while let Some(c) = self.chars.next_if(|c| matches!(c, ' ' | '\t')) {
            written.push(c);
        }
        let mut word = String::new();
        let mut quoted = false;
        while let Some(c) = self.chars.next_if(|c| {
            !matches!(
                c,
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
            )
        }) {
            written.push(c);
            match c {
                '\'' => {
                    quoted = true;
                    for q in self.chars.by_ref() {
                        written.push(q);
                        if q == '\'' {
                            break;
                        }
                        word.push(q);
                    }
                }
                '"' => {
                    quoted = true;
                    while let Some(q) = self.chars.next() {
                        written.push(q);
                        match q {
                            '"' => break,
                            // A line continued: nothing of the word.
                            '\\' if self.chars.next_if_eq(&'\n').is_some() => {
                                written.push('\n');
                            }
                            '\\' if matches!(self.chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                                let n = self.chars.next().unwrap_or(q);
                                written.push(n);
                                word.push(n);
                            }
                            _ => word.push(q),
                        }
                    }
                }
                '\\' if self.chars.next_if_eq(&'\n').is_some() => written.push('\n'),
                '\\' => {
                    quoted = true;
                    if let Some(n) = self.chars.next() {
                        written.push(n);
                        word.push(n);
                    }
                }
                _ => word.push(c),
            }
        }
        // Bash takes `$x` or `$(…)` as written; whether a line of that text
        // is meant to end the body cannot be told apart from a trick.
        self.out.unsure |= written.contains(['$', '`']) || word.is_empty() && !quoted;
        (word, quoted, written)
    }

    /// Reads one here-document's body, from the start of a line: up to its
    /// delimiter's line (or the end of the text). Returns the body and the
    /// text read.
    pub(super) fn body(&mut self, doc: &Heredoc) -> (String, String) {
        let mut body = String::new();
        let mut read = String::new();
        loop {
            let mut line = String::new();
            let mut ended = false;
            for c in self.chars.by_ref() {
                read.push(c);
                if c == '\n' {
                    // In an expanded body a backslash before the newline
                    // joins the next line to this one.
                    let backslashes = line.chars().rev().take_while(|c| *c == '\\').count();
                    if !doc.literal && backslashes % 2 == 1 {
                        line.pop();
                        continue;
                    }
                    ended = true;
                    break;
                }
                line.push(c);
            }
            let line = if doc.strip_tabs {
                line.trim_start_matches('\t')
            } else {
                &line
            };
            if line == doc.delimiter {
                break;
            }
            body.push_str(line);
            body.push('\n');
            if !ended {
                // No line ended it: what bash takes for its end may be
                // elsewhere.
                self.out.unsure = true;
                break;
            }
        }
        (body, read)
    }

    /// Reads the bodies of the here-documents opened on the line just
    /// ended. Each is analysed as a script of its own, whatever reads it: a
    /// shell, `ssh`, a database client, a pipe into one; an expanded one
    /// runs the commands it substitutes anyway. (So a quote in one is its
    /// own, and hides nothing after it.)
    pub(super) fn bodies(&mut self) {
        for doc in std::mem::take(&mut self.heredocs) {
            let (body, _) = self.body(&doc);
            if self.written_to_a_file(&doc) {
                // Text `cat` or `tee` write to a file: only what an
                // expanded body substitutes runs.
                if !doc.literal {
                    self.substitutions_in(&body);
                }
                continue;
            }
            self.out.nested.push(body);
        }
    }

    /// Whether `doc` feeds `cat` or `tee` whose output goes to a file, not
    /// on through a pipe.
    fn written_to_a_file(&self, doc: &Heredoc) -> bool {
        let Some(at) = doc.segment else {
            return false;
        };
        let Some(segment) = self.out.segments.get(at) else {
            return false;
        };
        // A file: not a process substitution or a descriptor, whose reader
        // may run it.
        let file = |target: &str| {
            !(target.starts_with(">(")
                || target.starts_with("/dev/")
                || target.starts_with("/proc/")
                || target.starts_with('$'))
        };
        let writer = match segment.words.first().map(String::as_str) {
            Some("cat") => {
                let targets: Vec<&str> = segment
                    .redirections
                    .iter()
                    .filter(|r| r.writes())
                    .map(|r| r.target.as_str())
                    .collect();
                !targets.is_empty() && targets.iter().all(|t| file(t))
            }
            Some("tee") => {
                segment.words[1..].iter().all(|w| file(w))
                    && segment
                        .redirections
                        .iter()
                        .all(|r| !r.writes() || file(&r.target))
            }
            _ => false,
        };
        // Not `cat` or `tee` as the line redefined them.
        let redefined = segment
            .words
            .first()
            .is_some_and(|name| self.defined.contains(name));
        writer && !redefined && !self.out.segments.get(at + 1).is_some_and(|next| next.piped)
    }

    /// The commands `text` (an expanded here-document's body) substitutes,
    /// each analysed as a script of its own.
    fn substitutions_in(&mut self, text: &str) {
        let mut inner = super::new(text, self.budget);
        inner.vars = self.vars.clone();
        inner.depth = self.depth;
        inner.in_double = true;
        while let Some(c) = inner.chars.next() {
            match c {
                '\\' => {
                    inner.chars.next();
                }
                '$' => inner.dollar(),
                '`' => inner.backtick(),
                _ => {}
            }
        }
        self.budget = inner.budget;
        self.out.nested.append(&mut inner.out.nested);
        self.out.unsure |= inner.out.unsure;
    }

    /// A here-document's operator (`<<`, `<<-`) just read: its delimiter.
    pub(super) fn heredoc(&mut self, operator: String) {
        self.close();
        let (delimiter, literal, _) = self.delimiter();
        self.tokens.push(operator.clone());
        self.tokens.push(delimiter.clone());
        self.heredocs.push(Heredoc {
            delimiter: delimiter.clone(),
            strip_tabs: operator == "<<-",
            literal,
            segment: Some(self.out.segments.len()),
        });
        self.redirections.push(Redirection {
            operator,
            target: delimiter,
        });
    }

    /// A redirection's operator starting with `first`; a descriptor
    /// written before it (`2>`, `{fd}>`) is part of it, not a word.
    pub(super) fn redirection(&mut self, first: char) {
        let word = self.word.as_str();
        let named = word.len() > 2
            && word.starts_with('{')
            && word.ends_with('}')
            && name_len(&word[1..]) == word.len() - 2;
        let fd = self.pending.is_none()
            && !self.quoted
            && !self.expanded
            && !word.is_empty()
            && (word.chars().all(|c| c.is_ascii_digit()) || named);
        if fd {
            self.word.clear();
            self.brace = false;
        } else {
            self.end_word();
        }
        let mut op = first.to_string();
        while let Some(n) = self.chars.next_if(|n| matches!(n, '>' | '<' | '|' | '&')) {
            op.push(n);
        }
        if op == "<<" {
            if self.chars.next_if_eq(&'-').is_some() {
                op.push('-');
            }
            self.heredoc(op);
            return;
        }
        self.open(op);
    }
}
