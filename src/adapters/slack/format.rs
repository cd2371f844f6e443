//! The model's Markdown as Slack mrkdwn, rendered from the blocks of
//! [`crate::render::markdown`]: `*bold*`, `_italic_`, `~strike~`,
//! `<url|text>`, headings as bold lines, list items as bullets, quotes as
//! `>` lines; `&`, `<`, `>` escaped everywhere (Slack decodes them inside
//! code too). Code cannot be closed from inside: a run of backticks in it
//! is shown with look-alike characters.

use crate::render::chunk::{self, CharCount};
use crate::render::markdown::{self, Quoted, Sink, Style};

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

/// A mrkdwn message being written.
#[derive(Default)]
pub struct Mrkdwn {
    doc: Quoted,
    link: usize,
}

impl Sink for Mrkdwn {
    type Out = String;

    fn text(&mut self, s: &str) {
        if self.link > 0 {
            // `|` ends a link's URL part.
            escape(&s.replace('|', "/"), &mut self.doc.text);
        } else {
            escape(s, &mut self.doc.text);
        }
    }

    fn code(&mut self, s: &str) {
        self.doc.text.push('`');
        escape(&s.replace('`', "ˋ"), &mut self.doc.text);
        self.doc.text.push('`');
    }

    fn open(&mut self, style: &Style) {
        match style {
            Style::Bold => self.doc.text.push('*'),
            Style::Italic => self.doc.text.push('_'),
            Style::Strike => self.doc.text.push('~'),
            Style::Link(url) => {
                self.link += 1;
                self.doc.text.push('<');
                escape(&url.replace('|', "%7C"), &mut self.doc.text);
                self.doc.text.push('|');
            }
        }
    }

    fn close(&mut self, style: &Style) {
        match style {
            Style::Bold => self.doc.text.push('*'),
            Style::Italic => self.doc.text.push('_'),
            Style::Strike => self.doc.text.push('~'),
            Style::Link(_) => {
                self.link = self.link.saturating_sub(1);
                self.doc.text.push('>');
            }
        }
    }

    /// Slack fences take no language.
    fn code_block(&mut self, _lang: &str, code: &str) {
        self.doc.text.push_str("```\n");
        escape(&code.replace("```", "ˋˋˋ"), &mut self.doc.text);
        self.doc.text.push_str("\n```");
    }

    fn quote(&mut self, open: bool) {
        self.doc.quote(open);
    }

    fn newline(&mut self) {
        self.doc.newline();
    }

    fn finish(self) -> String {
        self.doc.text
    }
}

/// Renders `src` as one mrkdwn text.
pub fn mrkdwn(src: &str) -> String {
    markdown::to_out::<Mrkdwn>(src)
}

/// Renders `src` as mrkdwn pieces of at most `limit` characters, split
/// between blocks.
pub fn pieces(src: &str, limit: usize) -> Vec<String> {
    chunk::text_parts::<CharCount<Mrkdwn>>(src, limit, false)
}

#[cfg(test)]
mod tests {
    use super::{mrkdwn, pieces};

    #[test]
    fn markdown_becomes_mrkdwn() {
        assert_eq!(
            mrkdwn("**bold**, *it*, ~~gone~~, `a<b`"),
            "*bold*, _it_, ~gone~, `a&lt;b`"
        );
        assert_eq!(
            mrkdwn("__also bold__ and ***both*** and \\*literal\\*"),
            "*also bold* and _*both*_ and *literal*"
        );
        assert_eq!(
            mrkdwn("see [the docs](https://x.io/a?b=1&c=2) or <https://y.io>"),
            "see <https://x.io/a?b=1&amp;c=2|the docs> or <https://y.io|https://y.io>"
        );
        assert_eq!(
            mrkdwn("## Plan\n- one\n  - two"),
            "*Plan*\n\n• one\n  • two"
        );
        assert_eq!(
            mrkdwn("a < b && snake_case_x"),
            "a &lt; b &amp;&amp; snake_case_x"
        );
        assert_eq!(mrkdwn("```rust\nif a<b {}\n```"), "```\nif a&lt;b {}\n```");
        assert_eq!(mrkdwn("~~~\ntilde fence\n~~~"), "```\ntilde fence\n```");
        assert_eq!(mrkdwn("> quoted\n> twice"), "> quoted\n> twice");
    }

    #[test]
    fn code_cannot_be_closed_from_inside() {
        let out = mrkdwn("````\necho ``` done\n````");
        assert_eq!(out, "```\necho ˋˋˋ done\n```");
        assert_eq!(mrkdwn("``a`b``"), "`aˋb`");
    }

    #[test]
    fn long_text_splits_into_section_sized_pieces() {
        let text = (0..50)
            .map(|i| format!("paragraph {i} with *some* words"))
            .collect::<Vec<_>>()
            .join("\n\n");
        let parts = pieces(&text, 300);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| p.chars().count() <= 300));
        assert!(!parts.iter().any(|p| p.contains("(1/")), "no markers");
    }

    #[test]
    fn what_models_write_renders_as_meant() {
        for (src, want) in [
            ("__bold__", "*bold*"),
            ("***both***", "_*both*_"),
            ("\\*not italic\\*", "*not italic*"),
            ("~~~\nfenced\n~~~", "```\nfenced\n```"),
            ("    indented", "```\nindented\n```"),
            ("``a`b``", "`aˋb`"),
            ("Title\n=====", "*Title*"),
            ("<https://x.io>", "<https://x.io|https://x.io>"),
            ("![cat](https://c.io/c.png)", "<https://c.io/c.png|cat>"),
            ("a|b [x|y](https://z.io)", "a|b <https://z.io|x/y>"),
        ] {
            assert_eq!(mrkdwn(src), want, "{src}");
        }
    }

    #[test]
    fn a_quote_of_many_lines_fits_the_limit() {
        // Found by the fuzzer: each line of a quote takes its prefix.
        let src = format!(
            "\n> quoted **bold `code`**\n[a](b)\r\n\0{}<details><summary>x</summary>",
            " ".repeat(3883)
        );
        for piece in pieces(&src, 1000) {
            assert!(piece.chars().count() <= 1000, "{}", piece.chars().count());
        }
    }

    #[test]
    fn markup_that_renders_to_nothing_still_makes_a_message() {
        // An empty table after a full piece is no piece of its own.
        let long = format!("{}\n\n| |\n|-|", "a".repeat(3000));
        assert_eq!(pieces(&long, 3000), ["a".repeat(3000)]);
        // A link's definition alone is shown as written.
        assert_eq!(
            pieces("[docs]: <https://x.io>\n", 2000),
            ["```\n[docs]: &lt;https://x.io&gt;\n```"]
        );
        crate::render::chunk::tests::never_blank(|src| pieces(src, 2000));
    }

    proptest::proptest! {
        #[test]
        fn slack_gets_balanced_mrkdwn_within_the_block_limit(
            text in crate::render::chunk::tests::markdownish(),
            limit in 200usize..3000,
        ) {
            let link = regex::Regex::new(r"<[^<>|]+\|[^<>]*>").unwrap();
            for piece in pieces(&text, limit) {
                proptest::prop_assert!(piece.chars().count() <= limit);
                proptest::prop_assert_eq!(piece.matches("```").count() % 2, 0, "{}", piece);
                let outside_links = link.replace_all(&piece, "");
                proptest::prop_assert!(!outside_links.contains('<'), "stray < in {}", piece);
            }
        }
    }
}
