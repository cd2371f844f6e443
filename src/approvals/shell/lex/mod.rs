//! The lexer: one pass over a cleaned command line that removes quoting
//! and escapes, splits simple commands at the control operators, collects
//! nested scripts (`$(…)`, backticks, `(…)`, `<(…)`), and resolves what
//! can be resolved without running anything: `$IFS` used as a blank,
//! positional parameters (empty), literal assignments made earlier on the
//! line (`p=rm; $p …`, `${v:-default}`), `$(echo …)` / `$(printf …)` of
//! literal words, and unquoted brace lists (`{rm,-rf,x}`). What cannot be
//! resolved is kept as written (`$x`, `$(…)`), for the detector to treat as
//! unknown.

mod echo;
mod names;
mod nest;
mod redirect;

use std::collections::HashMap;

use super::braces::braces;
use echo::echoed;
use names::compounds;
use nest::Nest;
use redirect::Heredoc;
pub use redirect::Redirection;

/// One simple command as lexed: its words, its redirections wherever
/// they were written, what its here-strings feed it, and
/// whether its standard input is the pipe from the command before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Words {
    pub(super) words: Vec<String>,
    pub(super) redirections: Vec<Redirection>,
    pub(super) fed: Vec<String>,
    pub(super) piped: bool,
}

#[derive(Default)]
pub(super) struct Lexed {
    pub(super) segments: Vec<Words>,
    pub(super) nested: Vec<String>,
    pub(super) whole: String,
    /// Where a here-document ends could not be known as bash knows it
    /// (its delimiter is an expansion): the line cannot be judged.
    pub(super) unsure: bool,
    /// The indexes in `nested` of subshells a pipe feeds.
    pub(super) fed_nested: Vec<usize>,
}

/// The expansion budget of one command line: a generous multiple of any
/// real command's needs (a 64 KiB line expanded a few times over).
pub(super) const EXPANSION_BUDGET: usize = 1 << 16;

/// What expansion (brace lists, variables, `$(echo …)`) may still produce
/// for the whole command line, in bytes and steps; past it the lexer
/// stops expanding and the line cannot be judged (the caller fails
/// closed).
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    left: usize,
    exhausted: bool,
}

impl Budget {
    pub(super) fn new(units: usize) -> Self {
        Self {
            left: units,
            exhausted: false,
        }
    }

    /// Takes `units`; false (and exhausted from then on) when they are not
    /// there.
    pub(super) fn take(&mut self, units: usize) -> bool {
        if self.exhausted || units > self.left {
            self.exhausted = true;
            return false;
        }
        self.left -= units;
        true
    }

    pub(super) fn exhausted(&self) -> bool {
        self.exhausted
    }
}

/// Deepest `$(echo $(echo …))` resolved; deeper ones stay unresolved.
const MAX_ECHO_DEPTH: usize = 4;

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    out: Lexed,
    words: Vec<String>,
    word: String,
    quoted: bool,
    /// The word has an unquoted `{` (a brace list, maybe).
    brace: bool,
    /// Inside double quotes: expansions are not split into words.
    in_double: bool,
    tokens: Vec<String>,
    /// The next simple command reads the pipe.
    piped: bool,
    /// Literal values assigned on the line so far.
    vars: HashMap<String, String>,
    /// How many `$(echo …)` resolutions this lexer is inside.
    depth: usize,
    /// Names whose value is not known here (set in a branch, a loop or a
    /// pipeline, twice, or by `read`), which no later use resolves.
    unknown: std::collections::HashSet<String>,
    /// How deep in compound commands (`{ }`, `if`, loops, `case`) the
    /// command being read is.
    compound: usize,
    /// How many nested constructs are being read (`$(` in `$(`…).
    nesting: usize,
    /// The functions and aliases the line defines.
    defined: std::collections::HashSet<String>,
    /// The depth a compound command a pipe feeds began at: each command
    /// inside it may read the pipe.
    fed_compound: Option<usize>,
    /// What expansion may still produce, shared by the whole line.
    budget: Budget,
    /// The redirections of the simple command being read.
    redirections: Vec<Redirection>,
    /// What its here-strings feed it.
    fed: Vec<String>,
    /// A redirection's operator whose target word is being read.
    pending: Option<String>,
    /// The operator that ended the last simple command (`&&`, `|`, `;`…).
    after: String,
    /// The word has text an expansion made (`2$@>x`: no descriptor).
    expanded: bool,
    /// Here-documents whose bodies start at the next line.
    heredocs: Vec<Heredoc>,
}

/// Shell keywords that carry no command of their own.
pub(super) fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "{" | "}"
            | "!"
            | "then"
            | "do"
            | "else"
            | "fi"
            | "done"
            | "if"
            | "while"
            | "until"
            | "elif"
            | "esac"
            | "time"
            | "coproc"
    )
}

pub(super) fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let name = name.strip_suffix('+').unwrap_or(name);
            !name.is_empty()
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// The variable name at the start of `text`.
fn name_len(text: &str) -> usize {
    text.char_indices()
        .find(|(i, c)| !(c.is_ascii_alphanumeric() || *c == '_') || (*i == 0 && c.is_ascii_digit()))
        .map_or(text.len(), |(i, _)| i)
}

impl Lexer<'_> {
    fn end_word(&mut self) {
        if (!self.word.is_empty() || self.quoted)
            && let Some(operator) = self.pending.take()
        {
            let word = std::mem::take(&mut self.word);
            self.target(operator, word);
        } else if !self.word.is_empty() || self.quoted {
            let word = super::words::fold_home(&std::mem::take(&mut self.word));
            // (Empty words a brace list leaves are dropped, as the shell
            // drops them.)
            let expanded = if self.brace {
                braces(&word, &mut self.budget)
                    .into_iter()
                    .filter(|w| !w.is_empty())
                    .collect()
            } else {
                vec![word]
            };
            for word in expanded {
                self.tokens.push(word.clone());
                self.words.push(word);
            }
        }
        self.quoted = false;
        self.brace = false;
        self.expanded = false;
    }

    fn end_segment(&mut self, op: &str) {
        self.end_word();
        self.close();
        let mut words = std::mem::take(&mut self.words);
        let (opened, closed) = compounds(&words);
        let outside = self.compound;
        self.compound = (self.compound + opened).saturating_sub(closed);
        let inside = outside > 0 || self.compound > 0;
        // A compound command a pipe feeds: each command in it may read it.
        if self.piped && opened > 0 && self.fed_compound.is_none() {
            self.fed_compound = Some(outside);
        }
        let fed_by_pipe = self
            .fed_compound
            .is_some_and(|at| outside > at || self.compound > at);
        if self.fed_compound.is_some_and(|at| self.compound <= at) {
            self.fed_compound = None;
        }
        // `function NAME`: a name the line defines.
        if words.first().is_some_and(|w| w == "function") {
            self.defined.extend(words.get(1).cloned());
        }
        // `coproc NAME { …; }`: the name is no command.
        if words.first().is_some_and(|w| w == "coproc") && words.get(2).is_some_and(|w| w == "{") {
            words.remove(1);
        }
        words.retain(|w| !matches!(w.as_str(), "{" | "}"));
        // Leading keywords (`time -p` too) go in unshape.
        let shaped = super::words::unshape(&mut words);
        let redirections = std::mem::take(&mut self.redirections);
        let fed = std::mem::take(&mut self.fed);
        let ran = !words.is_empty() || !redirections.is_empty();
        if ran {
            // A function or an alias of the line's fed a pipe or a
            // here-document: what its body does with it is not followed.
            let defined = words.first().is_some_and(|w| self.defined.contains(w));
            let given = self.piped || fed_by_pipe || redirections.iter().any(|r| r.here());
            self.out.unsure |= defined && given;
            // What a branch, a loop or a subshell (a pipeline's part, a
            // background job) assigns may not last for the line.
            let perhaps = shaped
                || inside
                || matches!(self.after.as_str(), "&&" | "||" | "|" | "&")
                || matches!(op, "|" | "&");
            self.remember(&words, perhaps);
            self.out.segments.push(Words {
                words,
                redirections,
                fed,
                piped: self.piped || fed_by_pipe,
            });
        }
        // (A pipe's reader may start on the next line: `curl … |⏎sh`.)
        if ran || op != ";" {
            self.piped = op == "|";
            self.after = op.to_string();
        }
        if !op.is_empty() {
            self.tokens.push(op.to_string());
        }
    }

    fn take_while_n(&mut self, n: usize, keep: impl Fn(char) -> bool) -> String {
        let mut out = String::new();
        while out.len() < n {
            match self.chars.next_if(|c| keep(*c)) {
                Some(c) => out.push(c),
                None => break,
            }
        }
        out
    }

    fn ansi_c(&mut self) {
        while let Some(c) = self.chars.next() {
            match c {
                '\'' => break,
                '\\' => match self.chars.next() {
                    Some('n') => self.word.push('\n'),
                    Some('t') => self.word.push('\t'),
                    Some('x') => {
                        let hex = self.take_while_n(2, |c| c.is_ascii_hexdigit());
                        if let Some(ch) = u8::from_str_radix(&hex, 16).ok().map(char::from) {
                            self.word.push(ch);
                        }
                    }
                    Some('u' | 'U') => {
                        let hex = self.take_while_n(8, |c| c.is_ascii_hexdigit());
                        if let Some(ch) =
                            u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)
                        {
                            self.word.push(ch);
                        }
                    }
                    Some(d @ '0'..='7') => {
                        let mut oct = d.to_string();
                        oct.push_str(&self.take_while_n(2, |c| ('0'..='7').contains(&c)));
                        if let Some(ch) = u8::from_str_radix(&oct, 8).ok().map(char::from) {
                            self.word.push(ch);
                        }
                    }
                    Some(other) => self.word.push(other),
                    None => {}
                },
                other => self.word.push(other),
            }
        }
        self.quoted = true;
    }

    /// Adds the value of an expansion to the word; unquoted, its blanks
    /// separate words.
    fn expand(&mut self, value: &str) {
        if !self.budget.take(value.len() + 1) {
            return;
        }
        // (A redirection's target is one word: the shell refuses one
        // that splits.)
        if self.in_double || self.pending.is_some() {
            self.word.push_str(value);
            return;
        }
        // Split at the blanks, and at whatever the line set IFS to.
        let ifs = self.vars.get("IFS").cloned().unwrap_or_default();
        let mut parts = value.split(|c: char| matches!(c, ' ' | '\t' | '\n') || ifs.contains(c));
        if let Some(first) = parts.next() {
            self.word.push_str(first);
        }
        for part in parts {
            self.end_word();
            self.word.push_str(part);
        }
    }

    fn dollar(&mut self) {
        self.expanded = true;
        match self.chars.peek().copied() {
            Some('(') => {
                self.chars.next();
                if self.chars.next_if_eq(&'(').is_some() {
                    // Arithmetic: a number; what it substitutes runs.
                    let inner = self.balanced('(', ')', Nest::Arithmetic);
                    self.arithmetic_end(&inner, Nest::Commands);
                    self.substitutes(&inner);
                    self.word.push_str(&format!("$(({inner}))"));
                    return;
                }
                let inner = self.balanced('(', ')', Nest::Commands);
                self.substitution(inner);
            }
            Some('\'') => {
                self.chars.next();
                self.ansi_c();
            }
            Some('{') => {
                self.chars.next();
                let inner = self.balanced('{', '}', Nest::Parameter);
                // `${x:-$(…)}`: the default's command runs.
                self.substitutes(&inner);
                self.parameter(&inner, true);
            }
            Some(c)
                if c.is_ascii_alphanumeric()
                    || matches!(c, '_' | '@' | '*' | '#' | '?' | '!' | '$' | '-') =>
            {
                let mut name = String::new();
                if c.is_ascii_alphabetic() || c == '_' {
                    while let Some(c) = self
                        .chars
                        .next_if(|c| c.is_ascii_alphanumeric() || *c == '_')
                    {
                        name.push(c);
                    }
                } else {
                    self.chars.next();
                    name.push(c);
                }
                self.parameter(&name, false);
            }
            _ => self.word.push('$'),
        }
    }

    /// `$name` or `${inner}` (`braced`).
    fn parameter(&mut self, inner: &str, braced: bool) {
        let written = || {
            if braced {
                format!("${{{inner}}}")
            } else {
                format!("${inner}")
            }
        };
        let len = name_len(inner);
        let (name, rest) = if len == 0 {
            inner.split_at(inner.chars().next().map_or(0, char::len_utf8))
        } else {
            inner.split_at(len)
        };
        if name == "IFS" {
            // Used as a blank, whatever is trimmed off it; a redirection's
            // target (a here-string's text) is not split.
            if self.in_double || self.pending.is_some() {
                self.word.push(' ');
            } else {
                self.end_word();
            }
            return;
        }
        if self.unknown.contains(name) {
            self.word.push_str(&written());
            return;
        }
        let positional = name.chars().all(|c| c.is_ascii_digit()) && !name.is_empty()
            || matches!(name, "@" | "*");
        let value = if name == "0" {
            // The shell's own name.
            Some("sh".to_string())
        } else if positional {
            // A fresh shell has none.
            Some(String::new())
        } else {
            self.vars.get(name).cloned()
        };
        match (value, rest) {
            (Some(value), "") => self.expand(&value),
            (Some(value), _) if rest.starts_with(":-") || rest.starts_with(":=") => {
                let value = if value.is_empty() {
                    rest[2..].to_string()
                } else {
                    value
                };
                self.expand(&value);
            }
            (Some(value), _) if rest.starts_with('-') || rest.starts_with('=') => {
                self.expand(&value)
            }
            (None, _) if rest.starts_with(":-") || rest.starts_with(":=") => {
                self.expand(&rest[2..]);
            }
            (None, _) if rest.starts_with('-') || rest.starts_with('=') => {
                self.expand(&rest[1..]);
            }
            _ => self.word.push_str(&written()),
        }
    }

    /// `$(inner)` or a backtick substitution: the output of `echo` or
    /// `printf` of literal words, else kept (and analysed as a command).
    fn substitution(&mut self, inner: String) {
        let output = (self.depth < MAX_ECHO_DEPTH)
            .then(|| echoed(&inner, &self.vars, self.depth + 1, &mut self.budget))
            .flatten();
        match output {
            Some(output) => self.expand(&output),
            None => self.word.push_str(&format!("$({inner})")),
        }
        self.out.nested.push(inner);
    }

    /// The end of `((inner)` just read as arithmetic: a `)` if it is one;
    /// else (`((rm -rf /) )`) bash reads a nested subshell or command
    /// substitution, whose commands `inner` and the rest up to its `)` are.
    fn arithmetic_end(&mut self, inner: &str, rest: Nest) {
        if self.chars.next_if_eq(&')').is_some() {
            return;
        }
        self.out.nested.push(inner.to_string());
        let rest = self.balanced('(', ')', rest);
        self.out.nested.push(rest);
    }

    /// Analyses `text` (an arithmetic expression, a parameter's
    /// operation) as a script of its own when it substitutes a command.
    fn substitutes(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') || text.contains("<(") {
            self.out.nested.push(text.to_string());
        }
    }

    /// A backtick substitution: its text with `` \` ``, `\\` and `\$`
    /// unescaped, as bash reads it.
    fn backtick(&mut self) {
        self.expanded = true;
        let mut inner = String::new();
        while let Some(c) = self.chars.next() {
            match c {
                '`' => break,
                '\\' => match self.chars.next() {
                    Some(n @ ('`' | '\\' | '$')) => inner.push(n),
                    Some(n) => {
                        inner.push('\\');
                        inner.push(n);
                    }
                    None => inner.push('\\'),
                },
                other => inner.push(other),
            }
        }
        self.substitution(inner);
    }

    fn double_quoted(&mut self) {
        self.quoted = true;
        self.in_double = true;
        while let Some(c) = self.chars.next() {
            match c {
                '"' => break,
                '\\' => match self.chars.peek() {
                    Some('"' | '\\' | '$' | '`') => {
                        let n = self.chars.next().unwrap_or('\\');
                        self.word.push(n);
                    }
                    Some('\n') => {
                        self.chars.next();
                    }
                    _ => self.word.push('\\'),
                },
                '$' => self.dollar(),
                '`' => self.backtick(),
                other => self.word.push(other),
            }
        }
        self.in_double = false;
    }

    fn single_quoted(&mut self) {
        while let Some(c) = self.chars.next_if(|c| *c != '\'') {
            self.word.push(c);
        }
        self.chars.next();
        self.quoted = true;
    }

    fn run(mut self) -> (Lexed, Budget) {
        while let Some(c) = self.chars.next() {
            match c {
                '\\' => match self.chars.next() {
                    Some('\n') | None => {}
                    Some(n) => {
                        self.word.push(n);
                        self.quoted = true;
                    }
                },
                '\'' => self.single_quoted(),
                '"' => self.double_quoted(),
                '$' => self.dollar(),
                '`' => self.backtick(),
                '#' if self.word.is_empty() => {
                    while self.chars.next_if(|c| *c != '\n').is_some() {}
                }
                ' ' | '\t' => self.end_word(),
                ';' => self.end_segment(";"),
                '\n' => {
                    self.end_segment(";");
                    self.bodies();
                }
                '&' => {
                    if self.chars.next_if_eq(&'&').is_some() {
                        self.end_segment("&&");
                    } else if self.chars.next_if_eq(&'>').is_some() {
                        self.end_word();
                        let op = if self.chars.next_if_eq(&'>').is_some() {
                            "&>>"
                        } else {
                            "&>"
                        };
                        self.open(op.into());
                    } else {
                        self.end_segment("&");
                    }
                }
                '|' => {
                    let op = if self.chars.next_if_eq(&'|').is_some() {
                        "||"
                    } else {
                        "|"
                    };
                    self.chars.next_if_eq(&'&');
                    self.end_segment(op);
                }
                '(' if self.chars.peek() == Some(&')') && !self.word.is_empty() => {
                    // `name()`: a function definition; its body follows.
                    self.chars.next();
                    let name = std::mem::take(&mut self.word);
                    self.defined.insert(name.clone());
                    let body = self.function_body();
                    // The definition stays in the line as written.
                    self.tokens.push(format!("{name}() {{{body}}}"));
                    self.out.nested.push(body);
                }
                // `case x in (pattern) …`: the parenthesis opens the arm.
                '(' if self.word.is_empty()
                    && self.words.first().is_some_and(|w| w == "case")
                    && self.words.last().is_some_and(|w| w == "in") => {}
                // `(( … ))`: arithmetic; what it substitutes runs.
                '(' if self.word.is_empty() && self.chars.next_if_eq(&'(').is_some() => {
                    let inner = self.balanced('(', ')', Nest::Arithmetic);
                    self.arithmetic_end(&inner, Nest::Subshell);
                    self.substitutes(&inner);
                }
                '(' if self.word.is_empty() => {
                    let inner = self.balanced('(', ')', Nest::Subshell);
                    // A subshell a pipe feeds: each of its commands may
                    // read it.
                    if self.piped && self.words.is_empty() {
                        self.out.fed_nested.push(self.out.nested.len());
                    }
                    self.out.nested.push(inner);
                }
                '<' | '>' if self.chars.peek() == Some(&'(') => {
                    self.chars.next();
                    let inner = self.balanced('(', ')', Nest::Commands);
                    // `>(…)`: its commands read what is written to it.
                    if c == '>' {
                        self.out.fed_nested.push(self.out.nested.len());
                    }
                    self.word.push_str(&format!("{c}({inner})"));
                    self.out.nested.push(inner);
                }
                '>' | '<' => self.redirection(c),
                '{' => {
                    self.brace = true;
                    self.word.push('{');
                }
                other => self.word.push(other),
            }
        }
        self.end_segment("");
        self.out.whole = self.tokens.join(" ");
        (self.out, self.budget)
    }

    /// The body of a function whose `name()` was just read: `{ … }` or
    /// `( … )`, without its braces.
    fn function_body(&mut self) -> String {
        while self.chars.next_if(|c| c.is_whitespace()).is_some() {}
        match self.chars.next() {
            Some('{') => self.balanced('{', '}', Nest::Commands),
            Some('(') => self.balanced('(', ')', Nest::Commands),
            Some(other) => {
                let mut body = other.to_string();
                while let Some(c) = self.chars.next_if(|c| *c != ';' && *c != '\n') {
                    body.push(c);
                }
                body
            }
            None => String::new(),
        }
    }
}

fn new(text: &str, budget: Budget) -> Lexer<'_> {
    Lexer {
        chars: text.chars().peekable(),
        out: Lexed::default(),
        words: Vec::new(),
        word: String::new(),
        quoted: false,
        brace: false,
        in_double: false,
        tokens: Vec::new(),
        piped: false,
        vars: HashMap::new(),
        depth: 0,
        unknown: std::collections::HashSet::new(),
        compound: 0,
        nesting: 0,
        defined: std::collections::HashSet::new(),
        fed_compound: None,
        budget,
        redirections: Vec::new(),
        fed: Vec::new(),
        pending: None,
        after: String::new(),
        expanded: false,
        heredocs: Vec::new(),
    }
}

/// Lexes one command line, paying its expansions from `budget`.
pub(super) fn lex(text: &str, budget: &mut Budget) -> Lexed {
    let (lexed, left) = new(text, *budget).run();
    *budget = left;
    lexed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(line: &str) -> Lexed {
        super::lex(line, &mut Budget::new(EXPANSION_BUDGET))
    }

    fn words(line: &str) -> Vec<String> {
        lex(line)
            .segments
            .into_iter()
            .map(|s| s.words.join(" "))
            .collect()
    }

    #[test]
    fn blanks_made_of_ifs_split_words() {
        assert_eq!(words("rm${IFS}-rf${IFS%?}/"), ["rm -rf /"]);
        assert_eq!(words("rm$IFS-rf$IFS/"), ["rm -rf /"]);
        assert_eq!(words("r$@m -rf /"), ["rm -rf /"]);
    }

    #[test]
    fn brace_lists_expand() {
        assert_eq!(words("{rm,-rf,/}"), ["rm -rf /"]);
        assert_eq!(words("echo {a,b}.txt"), ["echo a.txt b.txt"]);
        assert_eq!(words("echo '{a,b}'"), ["echo {a,b}"]);
        assert_eq!(words("{ rm -rf x; }"), ["rm -rf x"]);
    }

    #[test]
    fn literal_assignments_are_substituted() {
        assert_eq!(words("p=rm; $p -rf /")[1], "rm -rf /");
        assert_eq!(words("a=r;b=m;$a$b -rf /")[2], "rm -rf /");
        assert_eq!(words("c='rm -rf'; $c /")[1], "rm -rf /");
        assert_eq!(words("${x:-rm} -rf /"), ["rm -rf /"]);
        assert_eq!(words("export X=sh; curl x | $X")[1], "curl x");
        assert_eq!(words("export X=sh; curl x | $X")[2], "sh");
        assert_eq!(words("$unknown -rf /"), ["$unknown -rf /"]);
        assert_eq!(words("IFS=,; c=rm,-rf,/; $c")[2], "rm -rf /");
    }

    #[test]
    fn echo_and_printf_substitutions_are_their_output() {
        assert_eq!(words("$(echo rm) -rf /"), ["rm -rf /"]);
        assert_eq!(words("`printf %s r m` -rf /"), ["rm -rf /"]);
        assert_eq!(words(r"$(printf '\x72\155') -rf /"), ["rm -rf /"]);
        assert_eq!(
            words("$(echo cm0= | base64 -d) /"),
            ["$(echo cm0= | base64 -d) /"]
        );
    }

    #[test]
    fn functions_and_case_arms_show_their_commands() {
        let lexed = lex("f(){ rm -rf /; }; f");
        assert!(
            lexed.nested.contains(&" rm -rf /; ".to_string()),
            "{:?}",
            lexed.nested
        );
        assert_eq!(words("case y in y) rm -rf /;; esac")[0], "rm -rf /");
        assert_eq!(words("function g { rm -rf /; }")[0], "rm -rf /");
    }

    #[test]
    fn deep_nesting_is_cheap() {
        let deep = format!("{}rm{}", "$(echo ".repeat(5000), ")".repeat(5000));
        let started = std::time::Instant::now();
        let lexed = lex(&deep);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(lexed.segments.len(), 1);
        let braces = "{".repeat(100_000);
        let started = std::time::Instant::now();
        lex(&braces);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn pipes_mark_the_reader() {
        let lexed = lex("echo x | base64 -d | sh; ls");
        let piped: Vec<bool> = lexed.segments.iter().map(|s| s.piped).collect();
        assert_eq!(piped, [false, true, true, false]);
    }
}
