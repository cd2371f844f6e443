//! Shell-aware normalisation of a command line before pattern matching:
//! ANSI and control characters stripped, Unicode NFKC, quotes and escapes
//! removed (including `$'…'`), `$HOME`/`${HOME}` folded to `~`, compound
//! commands split (`;` `&&` `||` `|` `&`, newlines), and the contents of
//! `$(…)`, backticks, `(…)`, `<(…)`, `sh -c '…'` and `eval …` analysed as
//! commands of their own. Wrappers (`env`, `sudo`, `nice`, `timeout`,
//! `xargs`, `command`…) are peeled off and absolute program paths reduced to
//! their names.

use std::sync::LazyLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

/// One simple command: its words as the shell would see them, before and
/// after the wrappers were peeled off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Words with the wrappers still in front (`sudo -S rm -rf x`).
    pub raw: String,
    /// Words of the command itself (`rm -rf x`).
    pub command: String,
}

/// The normalised view of a command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Normalized {
    /// Every simple command found, nested ones included.
    pub segments: Vec<Segment>,
    /// The top-level line, words and operators separated by single spaces.
    pub whole: String,
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
    let mut queue = vec![(clean(command), 0usize)];
    let mut first = true;
    while let Some((text, depth)) = queue.pop() {
        let lexed = lex(&text);
        if first {
            out.whole = lexed.whole.clone();
            first = false;
        }
        for words in lexed.segments {
            let raw = words.join(" ");
            let command_words = peel(words);
            if depth < MAX_DEPTH
                && let Some(inner) = inline_script(&command_words)
            {
                queue.push((inner, depth + 1));
            }
            let command = command_words.join(" ");
            out.segments.push(Segment { raw, command });
        }
        if depth < MAX_DEPTH {
            queue.extend(lexed.nested.into_iter().map(|n| (n, depth + 1)));
        }
    }
    out
}

#[derive(Default)]
struct Lexed {
    segments: Vec<Vec<String>>,
    nested: Vec<String>,
    whole: String,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    out: Lexed,
    words: Vec<String>,
    word: String,
    quoted: bool,
    tokens: Vec<String>,
}

/// Shell keywords that carry no command of their own.
fn is_keyword(word: &str) -> bool {
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
    )
}

impl Lexer<'_> {
    fn end_word(&mut self) {
        if !self.word.is_empty() || self.quoted {
            let word = fold_home(&std::mem::take(&mut self.word));
            self.tokens.push(word.clone());
            self.words.push(word);
        }
        self.quoted = false;
    }

    fn end_segment(&mut self, op: &str) {
        self.end_word();
        let words: Vec<String> = std::mem::take(&mut self.words)
            .into_iter()
            .skip_while(|w| is_keyword(w))
            .filter(|w| !matches!(w.as_str(), "{" | "}"))
            .collect();
        if !words.is_empty() {
            self.out.segments.push(words);
        }
        if !op.is_empty() {
            self.tokens.push(op.to_string());
        }
    }

    /// Reads up to the `close` matching an already consumed `open`.
    fn balanced(&mut self, open: char, close: char) -> String {
        let mut depth = 1;
        let mut inner = String::new();
        let mut quote: Option<char> = None;
        while let Some(c) = self.chars.next() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c == '\\' => {
                    inner.push(c);
                    if let Some(n) = self.chars.next() {
                        inner.push(n);
                    }
                    continue;
                }
                None if c == open => depth += 1,
                None if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                None => {}
            }
            inner.push(c);
        }
        inner
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

    fn dollar(&mut self) {
        match self.chars.peek() {
            Some('(') => {
                self.chars.next();
                let inner = self.balanced('(', ')');
                self.word.push_str(&format!("$({inner})"));
                self.out.nested.push(inner);
            }
            Some('\'') => {
                self.chars.next();
                self.ansi_c();
            }
            _ => self.word.push('$'),
        }
    }

    fn backtick(&mut self) {
        let mut inner = String::new();
        while let Some(c) = self.chars.next_if(|c| *c != '`') {
            inner.push(c);
        }
        self.chars.next();
        self.word.push_str(&format!("$({inner})"));
        self.out.nested.push(inner);
    }

    fn double_quoted(&mut self) {
        self.quoted = true;
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
    }

    fn single_quoted(&mut self) {
        while let Some(c) = self.chars.next_if(|c| *c != '\'') {
            self.word.push(c);
        }
        self.chars.next();
        self.quoted = true;
    }

    fn redirection(&mut self, first: char) {
        let fd = !self.word.is_empty() && self.word.chars().all(|c| c.is_ascii_digit());
        if fd {
            self.word.clear();
        } else {
            self.end_word();
        }
        let mut op = first.to_string();
        while let Some(n) = self.chars.next_if(|n| matches!(n, '>' | '<' | '|' | '&')) {
            op.push(n);
        }
        self.tokens.push(op.clone());
        self.words.push(op);
    }

    fn run(mut self) -> Lexed {
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
                '\n' | ';' => self.end_segment(";"),
                '&' => {
                    if self.chars.next_if_eq(&'&').is_some() {
                        self.end_segment("&&");
                    } else if self.chars.next_if_eq(&'>').is_some() {
                        self.end_word();
                        self.tokens.push("&>".into());
                        self.words.push("&>".into());
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
                '(' if self.word.is_empty() => {
                    let inner = self.balanced('(', ')');
                    self.out.nested.push(inner);
                }
                '<' | '>' if self.chars.peek() == Some(&'(') => {
                    self.chars.next();
                    let inner = self.balanced('(', ')');
                    self.word.push_str(&format!("{c}({inner})"));
                    self.out.nested.push(inner);
                }
                '>' | '<' => self.redirection(c),
                other => self.word.push(other),
            }
        }
        self.end_segment("");
        self.out.whole = self.tokens.join(" ");
        self.out
    }
}

fn lex(text: &str) -> Lexed {
    Lexer {
        chars: text.chars().peekable(),
        out: Lexed::default(),
        words: Vec::new(),
        word: String::new(),
        quoted: false,
        tokens: Vec::new(),
    }
    .run()
}

fn fold_home(word: &str) -> String {
    for home in ["${HOME}", "$HOME"] {
        if let Some(rest) = word.strip_prefix(home)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("~{rest}");
        }
    }
    if let Some(rest) = word.strip_prefix("/home/") {
        let tail = rest.split_once('/').map_or("", |(_, t)| t);
        return if tail.is_empty() {
            "~".into()
        } else {
            format!("~/{tail}")
        };
    }
    word.to_string()
}

/// The program name of a word: `/usr/bin/rm` → `rm`.
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Options of wrappers that take a value.
fn takes_value(wrapper: &str, option: &str) -> bool {
    match wrapper {
        "sudo" | "doas" => matches!(
            option,
            "-u" | "-g"
                | "-C"
                | "-h"
                | "-p"
                | "-U"
                | "-r"
                | "-t"
                | "-D"
                | "--user"
                | "--group"
                | "--prompt"
        ),
        "env" => matches!(option, "-u" | "--unset" | "-C" | "--chdir"),
        "nice" => matches!(option, "-n" | "--adjustment"),
        "ionice" => matches!(option, "-c" | "-n" | "-p" | "--class" | "--classdata"),
        "timeout" => matches!(option, "-s" | "-k" | "--signal" | "--kill-after"),
        "xargs" => matches!(
            option,
            "-n" | "-I"
                | "-P"
                | "-d"
                | "-L"
                | "-a"
                | "-s"
                | "-E"
                | "--max-args"
                | "--max-procs"
                | "--delimiter"
                | "--arg-file"
        ),
        "watch" => matches!(option, "-n" | "--interval"),
        "stdbuf" => matches!(option, "-i" | "-o" | "-e"),
        "exec" => option == "-a",
        _ => false,
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Removes wrappers and assignments from the front of a simple command and
/// reduces the program to its name.
fn peel(mut words: Vec<String>) -> Vec<String> {
    loop {
        let Some(first) = words.first().cloned() else {
            return words;
        };
        if is_assignment(&first) {
            words.remove(0);
            continue;
        }
        let name = program(&first).to_string();
        let wrapper = matches!(
            name.as_str(),
            "env"
                | "command"
                | "builtin"
                | "exec"
                | "nohup"
                | "time"
                | "sudo"
                | "doas"
                | "nice"
                | "ionice"
                | "timeout"
                | "xargs"
                | "stdbuf"
                | "watch"
                | "busybox"
                | "chrt"
                | "taskset"
                | "unbuffer"
                | "setsid"
        );
        if !wrapper {
            words[0] = name;
            return words;
        }
        words.remove(0);
        while let Some(next) = words.first().cloned() {
            if next == "--" {
                words.remove(0);
                break;
            }
            let is_option = next.starts_with('-') && next.len() > 1;
            let numeric = matches!(name.as_str(), "chrt" | "taskset")
                && next.chars().all(|c| c.is_ascii_hexdigit() || c == ',');
            if is_option {
                words.remove(0);
                if takes_value(&name, &next) && !words.is_empty() {
                    words.remove(0);
                }
            } else if (name == "env" && is_assignment(&next)) || numeric {
                words.remove(0);
            } else {
                break;
            }
        }
        if name == "timeout"
            && words
                .first()
                .is_some_and(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        {
            words.remove(0);
        }
    }
}

/// The script of `sh -c SCRIPT`, `bash -lc SCRIPT`, `su -c SCRIPT`, or
/// the words of `eval …`.
fn inline_script(words: &[String]) -> Option<String> {
    let name = words.first()?.as_str();
    if name == "eval" {
        return Some(words[1..].join(" "));
    }
    let shell = matches!(
        name,
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "fish" | "ash" | "su"
    );
    if !shell {
        return None;
    }
    let at = words
        .iter()
        .position(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'))?;
    words.get(at + 1).cloned()
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
        assert_eq!(commands("\u{ff52}\u{ff4d} -rf x"), ["rm -rf x"]);
        assert_eq!(commands("r\u{200b}m -rf x"), ["rm -rf x"]);
        assert_eq!(commands("\x1b[31mrm\x1b[0m -rf x\0"), ["rm -rf x"]);
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
    fn redirections_are_words() {
        let n = normalize("echo x>/etc/passwd 2>&1");
        assert_eq!(n.segments[0].command, "echo x > /etc/passwd >& 1");
    }
}
