//! Text a program wrote for a terminal, as a reader of plain text should
//! see it: escape sequences (colours, cursor moves, titles) removed, and
//! lines a progress bar rewrote with carriage returns shown as they ended.

/// Removes ANSI escape sequences (colours, cursor moves).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // Parameters, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                // An OSC string, ended by BEL or ESC \.
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {
                chars.next();
            }
        }
    }
    out
}

/// What a terminal would end up showing of `raw` (a pseudo-terminal's
/// output), as plain lines: escape sequences removed, `\r\n` as a line
/// end, a line rewritten after a bare `\r` kept as last written, a
/// backspace erasing the character before it, other control characters
/// dropped (tabs kept).
pub fn screen_text(raw: &str) -> String {
    let plain = strip_ansi(raw);
    let mut out = String::with_capacity(plain.len());
    for (i, line) in plain.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let last = line
            .rsplit('\r')
            .find(|part| !part.is_empty())
            .unwrap_or("");
        let mut shown = String::with_capacity(last.len());
        for c in last.chars() {
            match c {
                '\u{8}' => {
                    shown.pop();
                }
                '\t' => shown.push(c),
                c if c.is_control() => {}
                c => shown.push(c),
            }
        }
        out.push_str(&shown);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminals_output_reads_as_plain_lines() {
        let raw = "\u{1b}[32mok\u{1b}[0m\r\n\u{1b}]0;title\u{7}progress 10%\rprogress 100%\r\ndone\u{8}E\r\n";
        assert_eq!(screen_text(raw), "ok\nprogress 100%\ndonE\n");
        assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m"), "red");
    }
}
