//! The model's Markdown as Slack mrkdwn: the spans of
//! [`crate::adapters::markdown`] as `*bold*`, `_italic_`, `~strike~`,
//! `<url|text>`; headings as bold lines, list items as bullets; `&`, `<`,
//! `>` escaped everywhere (Slack decodes them inside code too).

use crate::adapters::markdown::{Inline, Line, lines};

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
    for (i, line) in lines(src).into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match line {
            // Slack fences take no language.
            Line::FenceOpen(_) | Line::FenceClose => out.push_str("```"),
            Line::Code(code) => escape(code, &mut out),
            Line::Heading(spans) => {
                out.push('*');
                render(&spans, &mut out);
                out.push('*');
            }
            Line::Item(indent, spans) => {
                out.push_str(indent);
                out.push_str("• ");
                render(&spans, &mut out);
            }
            Line::Text(spans) => render(&spans, &mut out),
        }
    }
    out
}

fn render(spans: &[Inline<'_>], out: &mut String) {
    for span in spans {
        let wrap = |mark: char, inner: &[Inline<'_>], out: &mut String| {
            out.push(mark);
            render(inner, out);
            out.push(mark);
        };
        match span {
            Inline::Text(t) => escape(t, out),
            Inline::Code(c) => {
                out.push('`');
                escape(c, out);
                out.push('`');
            }
            Inline::Bold(inner) => wrap('*', inner, out),
            Inline::Italic(inner) => wrap('_', inner, out),
            Inline::Strike(inner) => wrap('~', inner, out),
            Inline::Link(text, url) => {
                out.push('<');
                escape(url, out);
                out.push('|');
                let mut label = String::new();
                render(text, &mut label);
                out.push_str(&label.replace('|', "/"));
                out.push('>');
            }
        }
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
