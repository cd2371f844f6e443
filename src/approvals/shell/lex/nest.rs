//! Reading a nested construct as written, up to its end as bash finds it:
//! `( … )`, `$( … )`, `<( … )`, a function's body, `$(( … ))`, `${ … }`.
//! Quotes, comments, here-documents and the constructs nested inside are
//! stepped over whole, so a `)` or a quote inside one closes nothing; the
//! text is then analysed as a script of its own.

use super::Lexer;
use super::redirect::Heredoc;

/// What a nested construct holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nest {
    /// `( … )`: a subshell, which reads the bodies of here-documents
    /// opened before it at its own newlines, as bash does.
    Subshell,
    /// `$( … )`, `<( … )`, a function's body: commands.
    Commands,
    /// `$(( … ))`, `(( … ))`: arithmetic (no comment, no here-document).
    Arithmetic,
    /// `${ … }`: a parameter and its operation.
    Parameter,
}

/// Deepest nesting of constructs stepped into; past it a construct's
/// text is read flat and the line is not judged (a hostile line must not
/// exhaust the stack).
const MAX_NESTING: usize = 64;

impl Nest {
    fn commands(self) -> bool {
        matches!(self, Nest::Subshell | Nest::Commands)
    }
}

impl Lexer<'_> {
    /// Reads up to the `close` matching an already consumed `open`: the
    /// text as written, without the closing character.
    pub(super) fn balanced(&mut self, open: char, close: char, kind: Nest) -> String {
        self.nesting += 1;
        let inner = self.balanced_here(open, close, kind);
        self.nesting -= 1;
        inner
    }

    /// Whether a construct inside may be stepped into.
    fn deeper(&mut self) -> bool {
        let deeper = self.nesting < MAX_NESTING;
        self.out.unsure |= !deeper;
        deeper
    }

    fn balanced_here(&mut self, open: char, close: char, kind: Nest) -> String {
        let mut depth = 1usize;
        let mut inner = String::new();
        // Here-documents pending when the construct began are read inside
        // it only by a subshell; those opened inside are read at its next
        // newline (or, left unread when it closes, at the one after it).
        let outer = self.heredocs.len();
        let mut word_start = true;
        let mut word = String::new();
        // `case` and `esac` count only where a command starts.
        let mut cases = 0usize;
        let mut command_position = true;
        let mut closed = false;
        while let Some(c) = self.chars.next() {
            let boundary = c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')');
            if boundary && kind.commands() {
                if !word.is_empty() {
                    if command_position {
                        match word.as_str() {
                            "case" => cases += 1,
                            "esac" => cases = cases.saturating_sub(1),
                            _ => {}
                        }
                    }
                    command_position = super::is_keyword(&word) && word != "}";
                }
                if matches!(c, ';' | '&' | '|' | '(' | '\n') {
                    command_position = true;
                }
                word.clear();
            }
            match c {
                '\\' => {
                    inner.push(c);
                    inner.extend(self.chars.next());
                    word_start = false;
                    word.push('\\');
                    continue;
                }
                '\'' => {
                    inner.push(c);
                    for q in self.chars.by_ref() {
                        inner.push(q);
                        if q == '\'' {
                            break;
                        }
                    }
                    word_start = false;
                    word.push('\'');
                    continue;
                }
                '"' if self.deeper() => {
                    inner.push(c);
                    self.double_quoted_raw(&mut inner);
                    word_start = false;
                    word.push('"');
                    continue;
                }
                '`' => {
                    inner.push(c);
                    self.backtick_raw(&mut inner);
                    word_start = false;
                    word.push('`');
                    continue;
                }
                '$' if self.chars.peek().is_some_and(|n| matches!(n, '(' | '{'))
                    && self.deeper() =>
                {
                    inner.push(c);
                    self.dollar_raw(&mut inner);
                    word_start = false;
                    word.push('$');
                    continue;
                }
                '#' if word_start && kind.commands() => {
                    inner.push(c);
                    while let Some(n) = self.chars.next_if(|n| *n != '\n') {
                        inner.push(n);
                    }
                    continue;
                }
                '<' if kind.commands()
                    && self.chars.peek() == Some(&'<')
                    && !inner.ends_with('<') =>
                {
                    self.chars.next();
                    inner.push_str("<<");
                    word_start = false;
                    if self.chars.next_if_eq(&'<').is_some() {
                        inner.push('<');
                        continue;
                    }
                    let strip_tabs = self.chars.next_if_eq(&'-').is_some();
                    if strip_tabs {
                        inner.push('-');
                    }
                    let (delimiter, literal, written) = self.delimiter();
                    inner.push_str(&written);
                    self.heredocs.push(Heredoc {
                        delimiter,
                        strip_tabs,
                        literal,
                        segment: None,
                    });
                    continue;
                }
                '\n' if kind.commands() && self.heredocs.len() > outer
                    || kind == Nest::Subshell && !self.heredocs.is_empty() =>
                {
                    inner.push(c);
                    let opened_inside = self.heredocs.split_off(outer);
                    // Those opened before it first, as they were.
                    if kind == Nest::Subshell {
                        self.bodies();
                    }
                    for doc in opened_inside {
                        let (_, read) = self.body(&doc);
                        inner.push_str(&read);
                    }
                    word_start = true;
                    continue;
                }
                _ if c == open => depth += 1,
                // A `case` pattern's `)` closes nothing.
                _ if c == close && depth == 1 && cases > 0 && kind.commands() => {}
                _ if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        closed = true;
                        break;
                    }
                }
                _ => {}
            }
            inner.push(c);
            word_start = boundary;
            if !boundary {
                word.push(c);
            }
        }
        // Never closed: where bash ends it is not known.
        self.out.unsure |= !closed;
        inner
    }

    /// The rest of a double-quoted string, as written, into `inner`.
    fn double_quoted_raw(&mut self, inner: &mut String) {
        while let Some(c) = self.chars.next() {
            inner.push(c);
            match c {
                '"' => return,
                '\\' => inner.extend(self.chars.next()),
                '`' => self.backtick_raw(inner),
                '$' if self.chars.peek().is_some_and(|n| matches!(n, '(' | '{'))
                    && self.deeper() =>
                {
                    self.dollar_raw(inner)
                }
                _ => {}
            }
        }
    }

    /// The rest of a backtick substitution, as written, into `inner`.
    fn backtick_raw(&mut self, inner: &mut String) {
        while let Some(c) = self.chars.next() {
            inner.push(c);
            match c {
                '`' => return,
                '\\' => inner.extend(self.chars.next()),
                _ => {}
            }
        }
    }

    /// `$(…)`, `$((…))` or `${…}` after a `$` already in `inner`, as
    /// written, into `inner`.
    fn dollar_raw(&mut self, inner: &mut String) {
        match self.chars.next() {
            Some('(') if self.chars.next_if_eq(&'(').is_some() => {
                inner.push_str("((");
                let text = self.balanced('(', ')', Nest::Arithmetic);
                inner.push_str(&text);
                inner.push(')');
                if self.chars.next_if_eq(&')').is_some() {
                    inner.push(')');
                } else {
                    // `$((…) )`: a command substitution after all.
                    let rest = self.balanced('(', ')', Nest::Commands);
                    inner.push_str(&rest);
                    inner.push(')');
                }
            }
            Some('(') => {
                inner.push('(');
                let text = self.balanced('(', ')', Nest::Commands);
                inner.push_str(&text);
                inner.push(')');
            }
            Some('{') => {
                inner.push('{');
                let text = self.balanced('{', '}', Nest::Parameter);
                inner.push_str(&text);
                inner.push('}');
            }
            Some(other) => inner.push(other),
            None => {}
        }
    }
}
