//! The model's Markdown as Discord markdown, rendered from the blocks of
//! [`crate::render::markdown`]: `**bold**`, `_italic_`, `~~strike~~`,
//! `[text](url)`, `#`–`###` headings (deeper ones bold), bullets, `>`
//! quotes. Text that Discord would read as markup is escaped (links are
//! left alone so they stay clickable); code cannot be closed from inside.
//! Pings are prevented where messages are sent (`allowed_mentions`), not
//! by mangling the text.

use crate::render::chunk::{self, CharCount};
use crate::render::markdown::{self, Quoted, Sink, Style};

/// Characters Discord reads as markup anywhere.
const SPECIAL: &str = "\\*_~`|";
/// Characters Discord reads as markup at the start of a line.
const LINE_START: &str = "#>-+";

/// A Discord message being written.
#[derive(Default)]
pub struct Markdown {
    doc: Quoted,
}

impl Markdown {
    fn at_line_start(&self) -> bool {
        let out = &self.doc.text;
        out.is_empty() || out.ends_with('\n') || out.ends_with("> ")
    }
}

impl Sink for Markdown {
    type Out = String;

    fn text(&mut self, s: &str) {
        for (i, word) in s.split_inclusive(char::is_whitespace).enumerate() {
            if word.starts_with("http://") || word.starts_with("https://") {
                self.doc.text.push_str(word);
                continue;
            }
            for (j, c) in word.chars().enumerate() {
                let line_start = i == 0 && j == 0 && self.at_line_start();
                if SPECIAL.contains(c) || (line_start && LINE_START.contains(c)) {
                    self.doc.text.push('\\');
                }
                self.doc.text.push(c);
            }
        }
    }

    fn code(&mut self, s: &str) {
        if s.contains('`') {
            self.doc.text.push_str("`` ");
            self.doc.text.push_str(&s.replace("``", "ˋˋ"));
            self.doc.text.push_str(" ``");
        } else {
            self.doc.text.push('`');
            self.doc.text.push_str(s);
            self.doc.text.push('`');
        }
    }

    fn open(&mut self, style: &Style) {
        self.doc.text.push_str(match style {
            Style::Bold => "**",
            Style::Italic => "_",
            Style::Strike => "~~",
            Style::Link(_) => "[",
        });
    }

    fn close(&mut self, style: &Style) {
        match style {
            Style::Bold => self.doc.text.push_str("**"),
            Style::Italic => self.doc.text.push('_'),
            Style::Strike => self.doc.text.push_str("~~"),
            Style::Link(url) => {
                self.doc.text.push_str("](");
                self.doc
                    .text
                    .push_str(&url.replace('(', "%28").replace(')', "%29"));
                self.doc.text.push(')');
            }
        }
    }

    fn code_block(&mut self, lang: &str, code: &str) {
        self.doc.text.push_str("```");
        self.doc.text.push_str(lang);
        self.doc.text.push('\n');
        self.doc.text.push_str(&code.replace("```", "ˋˋˋ"));
        self.doc.text.push_str("\n```");
    }

    fn heading(&mut self, level: u8, open: bool) {
        match (level, open) {
            (1..=3, true) => {
                self.doc.text.push_str(&"#".repeat(usize::from(level)));
                self.doc.text.push(' ');
            }
            (1..=3, false) => {}
            (_, true) => self.open(&Style::Bold),
            (_, false) => self.close(&Style::Bold),
        }
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

/// Renders `src` as one Discord message text.
pub fn render(src: &str) -> String {
    markdown::to_out::<Markdown>(src)
}

/// Renders `src` in messages of at most `limit` characters (markup that
/// renders to nothing is shown as written).
pub fn chunks(src: &str, limit: usize) -> Vec<String> {
    chunk::text_parts::<CharCount<Markdown>>(src, limit, true)
}

#[cfg(test)]
mod tests {
    use super::{chunks, render};

    #[test]
    fn discord_gets_markdown_it_reads_the_same_way() {
        assert_eq!(
            render("## Plan\n**bold** and `code`"),
            "## Plan\n\n**bold** and `code`"
        );
        assert_eq!(render("#### Deep\ntext"), "**Deep**\n\ntext");
        assert_eq!(
            render("```sh\n#### not a heading"),
            "```sh\n#### not a heading\n```"
        );
        assert_eq!(render("#hashtag stays"), "\\#hashtag stays");
        assert_eq!(render("__bold__ and ***both***"), "**bold** and _**both**_");
        assert_eq!(render("~~~\nfence\n~~~"), "```\nfence\n```");
        assert_eq!(
            render("snake_case and 2 * 3 at https://x.io/a_b"),
            "snake\\_case and 2 \\* 3 at https://x.io/a_b"
        );
        assert_eq!(
            render("see [docs](https://x.io/a_(b))"),
            "see [docs](https://x.io/a_%28b%29)"
        );
    }

    #[test]
    fn code_cannot_be_closed_from_inside() {
        let block = render("````\necho ```\n@everyone\n````");
        assert_eq!(block.matches("```").count(), 2, "{block}");
        assert!(block.ends_with("@everyone\n```"));
        assert_eq!(render("``a`b``"), "`` a`b ``");
    }

    #[test]
    fn a_link_longer_than_a_message_keeps_its_text_and_loses_its_address() {
        let src = format!(
            "[^1]: note{}\n| a | b |\n|---|---|\n| 1 | 2 |\n[^1]: note",
            "é".repeat(4161)
        );
        // (Found by the fuzzer: the definition's address is 4 161 characters.)
        let pieces = chunks(&src, 1000);
        for piece in &pieces {
            assert!(
                piece.chars().count() <= 1000,
                "{}: {piece:.80}",
                piece.chars().count()
            );
        }
        assert!(pieces.concat().contains("^1"), "{pieces:?}");
        assert!(!pieces.concat().contains("](note"), "{pieces:?}");
    }

    #[test]
    fn a_code_language_longer_than_a_message_is_left_off() {
        // (Found by the fuzz campaign.)
        let src = format!(
            "```{}\n{}\n```",
            "a".repeat(2600),
            "let x = 1;\n".repeat(300)
        );
        let pieces = chunks(&src, 1000);
        assert!(pieces.len() > 1);
        for piece in &pieces {
            assert!(
                piece.chars().count() <= 1000,
                "{}: {piece:.80}",
                piece.chars().count()
            );
            assert!(piece.contains("let x = 1;"), "{piece:.80}");
        }
    }

    #[test]
    fn what_models_write_renders_as_meant() {
        for (src, want) in [
            ("__bold__", "**bold**"),
            ("***both***", "_**both**_"),
            ("\\*not italic\\*", "\\*not italic\\*"),
            ("~~~\nfenced\n~~~", "```\nfenced\n```"),
            ("    indented", "```\nindented\n```"),
            ("``a`b``", "`` a`b ``"),
            ("Title\n=====", "# Title"),
            ("<https://x.io>", "[https://x.io](https://x.io)"),
            ("![cat](https://c.io/c.png)", "[cat](https://c.io/c.png)"),
        ] {
            assert_eq!(render(src), want, "{src}");
        }
    }

    #[test]
    fn markup_that_renders_to_nothing_still_makes_a_message() {
        // A link's definition alone is shown as written.
        assert_eq!(
            chunks("[docs]: <https://x.io>\n", 2000),
            ["```\n[docs]: <https://x.io>\n```"]
        );
        crate::render::chunk::tests::never_blank(|src| chunks(src, 2000));
    }

    proptest::proptest! {
        #[test]
        fn discord_messages_fit_and_close_their_code(
            text in crate::render::chunk::tests::markdownish(),
            limit in 200usize..2000,
        ) {
            for part in super::chunks(&text, limit) {
                proptest::prop_assert!(part.chars().count() <= limit);
                proptest::prop_assert_eq!(part.matches("```").count() % 2, 0, "{}", part);
            }
        }
    }
}
