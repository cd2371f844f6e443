//! The model's Markdown rendered as Telegram MarkdownV2: matched `**bold**`,
//! `*italic*` / `_italic_`, `~~strike~~`, `` `code` ``, fenced blocks,
//! `[links](url)` and `# headings` become entities; every other special
//! character is escaped, so unbalanced markup shows as typed instead of
//! failing the whole message.

/// Characters MarkdownV2 reserves outside entities.
const SPECIAL: &str = "_*[]()~`>#+-=|{}.!\\";

fn escape_text(s: &str, out: &mut String) {
    for c in s.chars() {
        if SPECIAL.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
}

fn escape_code(s: &str, out: &mut String) {
    for c in s.chars() {
        if c == '`' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

fn escape_url(s: &str, out: &mut String) {
    for c in s.chars() {
        if c == ')' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Renders `src` as MarkdownV2.
pub fn markdown_v2(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + src.len() / 8);
    let mut in_fence = false;
    for (i, line) in src.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            if in_fence {
                out.push_str("```");
            } else {
                let lang: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '+' || *c == '-')
                    .collect();
                out.push_str("```");
                out.push_str(&lang);
            }
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            escape_code(line, &mut out);
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            out.push('*');
            inline(trimmed[hashes..].trim(), &mut out, false);
            out.push('*');
            continue;
        }
        inline(line, &mut out, false);
    }
    if in_fence {
        out.push_str("\n```");
    }
    out
}

/// Whether `c` can stand next to an emphasis delimiter inside a word.
fn wordish(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric())
}

/// Finds the closing `delim` in `s` (after the opener), for a span that
/// does not start or end with a space.
fn closing(s: &str, delim: &str, word_bound: bool) -> Option<usize> {
    let mut from = 0;
    while let Some(pos) = s[from..].find(delim) {
        let at = from + pos;
        let inner = &s[..at];
        let after = s[at + delim.len()..].chars().next();
        let padded = inner.starts_with(' ') || inner.ends_with(' ');
        let glued = word_bound && wordish(after);
        if !(inner.is_empty() || padded || glued) {
            return Some(at);
        }
        from = at + delim.len();
    }
    None
}

/// The index of the `)` closing a link target, allowing balanced
/// parentheses inside it (`https://en.wikipedia.org/wiki/Rust_(language)`).
fn url_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(i),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn inline(s: &str, out: &mut String, in_link: bool) {
    let mut i = 0;
    let mut prev: Option<char> = None;
    while i < s.len() {
        let rest = &s[i..];
        let c = rest.chars().next().unwrap_or_default();
        if c == '`'
            && let Some(end) = rest[1..].find('`')
        {
            out.push('`');
            escape_code(&rest[1..1 + end], out);
            out.push('`');
            i += end + 2;
            prev = Some('`');
            continue;
        }
        let pairs: [(&str, char, bool); 4] = [
            ("**", '*', false),
            ("~~", '~', false),
            ("*", '_', true),
            ("_", '_', true),
        ];
        let mut matched = false;
        for (delim, entity, word_bound) in pairs {
            if !rest.starts_with(delim) || (word_bound && wordish(prev)) {
                continue;
            }
            let body = &rest[delim.len()..];
            if let Some(end) = closing(body, delim, word_bound) {
                out.push(entity);
                inline(&body[..end], out, in_link);
                out.push(entity);
                i += delim.len() * 2 + end;
                prev = Some(entity);
                matched = true;
                break;
            }
        }
        if matched {
            continue;
        }
        if c == '['
            && !in_link
            && let Some(close) = rest.find("](")
            && let Some(end) = url_end(&rest[close + 2..])
        {
            let text = &rest[1..close];
            let url = &rest[close + 2..close + 2 + end];
            if !text.is_empty() && !url.contains(char::is_whitespace) && url.contains(':') {
                out.push('[');
                inline(text, out, true);
                out.push_str("](");
                escape_url(url, out);
                out.push(')');
                i += close + 3 + end;
                prev = Some(')');
                continue;
            }
        }
        escape_text(&rest[..c.len_utf8()], out);
        i += c.len_utf8();
        prev = Some(c);
    }
}

#[cfg(test)]
mod tests {
    use super::markdown_v2;

    #[test]
    fn plain_specials_are_escaped() {
        assert_eq!(
            markdown_v2("1. Costs $5 (approx.) - done!"),
            "1\\. Costs $5 \\(approx\\.\\) \\- done\\!"
        );
    }

    #[test]
    fn matched_markup_becomes_entities() {
        assert_eq!(
            markdown_v2("**bold** and *it* and ~~gone~~ and `a_b*c`"),
            "*bold* and _it_ and ~gone~ and `a_b*c`"
        );
        assert_eq!(
            markdown_v2("see [the docs](https://x.io/a_(b))"),
            "see [the docs](https://x.io/a_(b\\))"
        );
        assert_eq!(markdown_v2("# Title!"), "*Title\\!*");
    }

    #[test]
    fn unbalanced_or_intraword_markers_stay_literal() {
        assert_eq!(markdown_v2("snake_case_name"), "snake\\_case\\_name");
        assert_eq!(markdown_v2("2 * 3 = 6"), "2 \\* 3 \\= 6");
        assert_eq!(markdown_v2("**open"), "\\*\\*open");
    }

    #[test]
    fn fences_keep_their_language_and_escape_only_code_specials() {
        assert_eq!(
            markdown_v2("```rust\nlet s = \"a`b\\\\\";\n```"),
            "```rust\nlet s = \"a\\`b\\\\\\\\\";\n```"
        );
        assert_eq!(markdown_v2("```\nopen"), "```\nopen\n```");
    }
}
