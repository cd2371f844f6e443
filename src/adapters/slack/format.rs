//! The model's Markdown as Slack mrkdwn: the spans of
//! [`crate::render::markdown`] as `*bold*`, `_italic_`, `~strike~`,
//! `<url|text>`; headings as bold lines, list items as bullets; `&`, `<`,
//! `>` escaped everywhere (Slack decodes them inside code too).

use crate::render::markdown::{Dialect, render};

/// Escapes `&`, `<` and `>` as Slack requires.
pub(super) fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
}

struct Mrkdwn;

impl Dialect for Mrkdwn {
    const MARKS: (char, char, char) = ('*', '_', '~');

    fn text(s: &str, out: &mut String) {
        escape(s, out);
    }

    fn code(s: &str, out: &mut String) {
        escape(s, out);
    }

    /// Slack fences take no language.
    fn fence(_lang: &str, out: &mut String) {
        out.push_str("```");
    }

    fn link(label: &str, url: &str, out: &mut String) {
        out.push('<');
        escape(url, out);
        out.push('|');
        out.push_str(&label.replace('|', "/"));
        out.push('>');
    }
}

/// Renders `src` as mrkdwn.
pub fn mrkdwn(src: &str) -> String {
    render::<Mrkdwn>(src)
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
