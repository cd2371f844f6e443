//! The model's Markdown as Slack mrkdwn: `**bold**` → `*bold*`, `*it*` /
//! `_it_` → `_it_`, `~~x~~` → `~x~`, `[text](url)` → `<url|text>`,
//! headings → bold lines, `- item` → `• item`; `&`, `<`, `>` escaped outside
//! code; code spans and fences kept.

fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
}

/// Renders `src` as mrkdwn.
pub fn mrkdwn(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 16);
    let mut in_fence = false;
    for (i, line) in src.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            // Slack fences take no language.
            out.push_str("```");
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            escape(line, &mut out);
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            out.push('*');
            inline(trimmed[hashes..].trim(), &mut out);
            out.push('*');
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(item) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
            .or_else(|| trimmed.strip_prefix("+ "))
        {
            out.push_str(indent);
            out.push_str("• ");
            inline(item, &mut out);
            continue;
        }
        inline(line, &mut out);
    }
    out
}

fn closing(s: &str, delim: &str) -> Option<usize> {
    let end = s.find(delim)?;
    let inner = &s[..end];
    (!inner.is_empty() && !inner.starts_with(' ') && !inner.ends_with(' ')).then_some(end)
}

fn inline(s: &str, out: &mut String) {
    let mut i = 0;
    let mut prev: Option<char> = None;
    while i < s.len() {
        let rest = &s[i..];
        let c = rest.chars().next().unwrap_or_default();
        if c == '`'
            && let Some(end) = rest[1..].find('`')
        {
            out.push('`');
            escape(&rest[1..1 + end], out);
            out.push('`');
            i += end + 2;
            prev = Some('`');
            continue;
        }
        let intraword = prev.is_some_and(char::is_alphanumeric);
        let pairs: [(&str, char, bool); 4] = [
            ("**", '*', false),
            ("~~", '~', false),
            ("*", '_', true),
            ("_", '_', true),
        ];
        let mut matched = false;
        for (delim, mark, word_bound) in pairs {
            if !rest.starts_with(delim) || (word_bound && intraword) {
                continue;
            }
            let body = &rest[delim.len()..];
            if let Some(end) = closing(body, delim) {
                out.push(mark);
                inline(&body[..end], out);
                out.push(mark);
                i += 2 * delim.len() + end;
                prev = Some(mark);
                matched = true;
                break;
            }
        }
        if matched {
            continue;
        }
        if c == '['
            && let Some(close) = rest.find("](")
            && let Some(end) = rest[close + 2..].find(')')
        {
            let text = &rest[1..close];
            let url = &rest[close + 2..close + 2 + end];
            if !text.is_empty() && url.contains(':') && !url.contains(char::is_whitespace) {
                out.push('<');
                escape(url, out);
                out.push('|');
                escape(&text.replace('|', "/"), out);
                out.push('>');
                i += close + 3 + end;
                prev = Some('>');
                continue;
            }
        }
        escape(&rest[..c.len_utf8()], out);
        i += c.len_utf8();
        prev = Some(c);
    }
}

#[cfg(test)]
mod tests {
    use super::mrkdwn;

    #[test]
    fn markdown_becomes_mrkdwn() {
        assert_eq!(
            mrkdwn("**bold**, *it*, ~~gone~~, `a<b`"),
            "*bold*, _it_, ~gone~, `a&lt;b`"
        );
        assert_eq!(
            mrkdwn("see [the docs](https://x.io/a?b=1&c=2)"),
            "see <https://x.io/a?b=1&amp;c=2|the docs>"
        );
        assert_eq!(mrkdwn("## Plan\n- one\n  - two"), "*Plan*\n• one\n  • two");
        assert_eq!(
            mrkdwn("a < b && snake_case_x"),
            "a &lt; b &amp;&amp; snake_case_x"
        );
        assert_eq!(mrkdwn("```rust\nif a<b {}\n```"), "```\nif a&lt;b {}\n```");
    }
}
