//! The model's Markdown for Telegram as plain text with entities (bold,
//! italic, strikethrough, code, pre with its language, text links,
//! blockquotes), offsets and lengths in UTF-16 units, rendered from the
//! blocks of [`crate::render::markdown`]. Nothing is escaped, so nothing
//! can fail to parse: what CommonMark reads as text arrives as typed.

use teloxide_core::types::{MessageEntity, MessageEntityKind};

use crate::render::chunk::{self, Dialect, utf16};
use crate::render::markdown::{Sink, Style};

/// A message: its text and entities.
pub type Rendered = (String, Vec<MessageEntity>);

/// A Telegram message being written.
#[derive(Default)]
pub struct Entities {
    text: String,
    units: usize,
    open: Vec<usize>,
    quotes: Vec<usize>,
    entities: Vec<MessageEntity>,
}

impl Entities {
    fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.units += utf16(s);
    }

    fn entity(&mut self, kind: MessageEntityKind, start: usize) {
        if self.units > start {
            self.entities
                .push(MessageEntity::new(kind, start, self.units - start));
        }
    }
}

impl Sink for Entities {
    type Out = Rendered;

    fn text(&mut self, s: &str) {
        self.push(s);
    }

    fn code(&mut self, s: &str) {
        let start = self.units;
        self.push(s);
        self.entity(MessageEntityKind::Code, start);
    }

    fn open(&mut self, _style: &Style) {
        self.open.push(self.units);
    }

    fn close(&mut self, style: &Style) {
        let start = self.open.pop().unwrap_or(self.units);
        let kind = match style {
            Style::Bold => MessageEntityKind::Bold,
            Style::Italic => MessageEntityKind::Italic,
            Style::Strike => MessageEntityKind::Strikethrough,
            Style::Link(url) => match reqwest::Url::parse(url) {
                Ok(url) if matches!(url.scheme(), "http" | "https" | "tg" | "mailto") => {
                    MessageEntityKind::TextLink { url }
                }
                // A link Telegram would refuse stays text.
                _ => return,
            },
        };
        self.entity(kind, start);
    }

    fn code_block(&mut self, lang: &str, code: &str) {
        let start = self.units;
        self.push(code);
        let language = (!lang.is_empty()).then(|| lang.to_string());
        self.entity(MessageEntityKind::Pre { language }, start);
    }

    fn quote(&mut self, open: bool) {
        if open {
            self.quotes.push(self.units);
        } else if let Some(start) = self.quotes.pop() {
            self.entity(MessageEntityKind::Blockquote, start);
        }
    }

    fn newline(&mut self) {
        self.push("\n");
    }

    fn finish(mut self) -> Rendered {
        self.entities
            .sort_by_key(|e| (e.offset, std::cmp::Reverse(e.length)));
        (self.text, self.entities)
    }
}

/// Telegram's dialect, counted in UTF-16 units of the text.
pub struct Telegram;

impl Dialect for Telegram {
    type Sink = Entities;
    fn size(out: &Rendered) -> usize {
        utf16(&out.0)
    }
}

/// `src` rendered in messages of at most `limit` UTF-16 units, blank
/// where its markup renders to nothing (a code block just opened).
pub fn rendered(src: &str, limit: usize) -> Vec<Rendered> {
    chunk::chunks::<Telegram>(src, limit)
}

/// Renders `src` in messages of at most `limit` UTF-16 units. Markup that
/// renders to nothing but blanks (an empty code block) is sent as written:
/// Telegram refuses a message without text.
pub fn chunks(src: &str, limit: usize) -> Vec<Rendered> {
    let rendered = rendered(src, limit);
    if !rendered.iter().all(|(body, _)| body.trim().is_empty()) {
        return rendered;
    }
    let (mut written, mut units) = (String::new(), 0);
    for c in src.trim().chars() {
        units += c.len_utf16();
        if units > limit {
            break;
        }
        written.push(c);
    }
    vec![(written, Vec::new())]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(src: &str) -> Rendered {
        chunks(src, 4096).swap_remove(0)
    }

    fn spans(r: &Rendered) -> Vec<(String, &'static str)> {
        let units: Vec<u16> = r.0.encode_utf16().collect();
        r.1.iter()
            .map(|e| {
                let text = String::from_utf16_lossy(&units[e.offset..e.offset + e.length]);
                let kind = match &e.kind {
                    MessageEntityKind::Bold => "bold",
                    MessageEntityKind::Italic => "italic",
                    MessageEntityKind::Strikethrough => "strike",
                    MessageEntityKind::Code => "code",
                    MessageEntityKind::Pre { .. } => "pre",
                    MessageEntityKind::TextLink { .. } => "link",
                    MessageEntityKind::Blockquote => "quote",
                    _ => "other",
                };
                (text, kind)
            })
            .collect()
    }

    #[test]
    fn markup_that_renders_to_blanks_is_sent_as_written() {
        assert_eq!(
            one("~~~sh\n\n~~~"),
            ("~~~sh\n\n~~~".to_string(), Vec::new())
        );
        assert_eq!(chunks("```\n   \n```", 5)[0].0, "```\n ");
    }

    #[test]
    fn markup_becomes_entities_over_plain_text() {
        let r = one("**Done.** See `x_y` (v1.2)!");
        assert_eq!(r.0, "Done. See x_y (v1.2)!");
        assert_eq!(
            spans(&r),
            [("Done.".to_string(), "bold"), ("x_y".into(), "code")]
        );
        let r = one("__b__ ***both*** ~~gone~~ [docs](https://x.io/a_(b)) \\*lit\\*");
        assert_eq!(r.0, "b both gone docs *lit*");
        assert_eq!(
            spans(&r),
            [
                ("b".to_string(), "bold"),
                ("both".into(), "bold"),
                ("both".into(), "italic"),
                ("gone".into(), "strike"),
                ("docs".into(), "link")
            ]
        );
    }

    #[test]
    fn offsets_count_utf16_units() {
        let r = one("😀 **bé** after");
        assert_eq!(r.1[0].offset, 3, "the emoji is two units, the space one");
        assert_eq!(r.1[0].length, 2);
    }

    #[test]
    fn code_blocks_keep_their_language_and_quotes_are_entities() {
        let r = one("# Title\n\n```rust\nlet a = \"`\\\\\";\n```\n\n> said");
        assert_eq!(r.0, "Title\n\nlet a = \"`\\\\\";\n\nsaid");
        let pre =
            r.1.iter()
                .find(|e| matches!(e.kind, MessageEntityKind::Pre { .. }))
                .unwrap();
        assert_eq!(
            pre.kind,
            MessageEntityKind::Pre {
                language: Some("rust".into())
            }
        );
        assert_eq!(
            spans(&r),
            [
                ("Title".to_string(), "bold"),
                ("let a = \"`\\\\\";".into(), "pre"),
                ("said".into(), "quote")
            ]
        );
    }

    #[test]
    fn links_telegram_would_refuse_stay_text() {
        let r = one("[local](file:///etc/passwd) and [rel](docs/a)");
        assert_eq!(r.0, "local and rel");
        assert!(r.1.is_empty());
    }

    #[test]
    fn what_models_write_renders_as_meant() {
        /// Source, text, and the entities over it.
        type Case = (
            &'static str,
            &'static str,
            &'static [(&'static str, &'static str)],
        );
        let cases: &[Case] = &[
            ("__bold__", "bold", &[("bold", "bold")]),
            (
                "***both***",
                "both",
                &[("both", "bold"), ("both", "italic")],
            ),
            ("\\*not italic\\*", "*not italic*", &[]),
            ("~~~\nfenced\n~~~", "fenced", &[("fenced", "pre")]),
            ("    indented", "indented", &[("indented", "pre")]),
            ("``a`b``", "a`b", &[("a`b", "code")]),
            ("Title\n=====", "Title", &[("Title", "bold")]),
            (
                "<https://x.io>",
                "https://x.io",
                &[("https://x.io", "link")],
            ),
            ("![cat](https://c.io/c.png)", "cat", &[("cat", "link")]),
            ("snake_case 2 * 3 (a.b)!", "snake_case 2 * 3 (a.b)!", &[]),
        ];
        for (src, text, want) in cases {
            let r = one(src);
            assert_eq!(r.0, *text, "{src}");
            let got = spans(&r);
            let got: Vec<(&str, &str)> = got.iter().map(|(t, k)| (t.as_str(), *k)).collect();
            assert_eq!(got, *want, "{src}");
        }
    }

    proptest::proptest! {
        #[test]
        fn telegram_never_gets_entities_it_would_refuse(
            text in crate::render::chunk::tests::markdownish(),
            limit in 200usize..4096,
        ) {
            for (body, entities) in chunks(&text, limit) {
                let units = utf16(&body);
                proptest::prop_assert!(units <= limit);
                proptest::prop_assert!(!body.trim().is_empty());
                for (i, e) in entities.iter().enumerate() {
                    proptest::prop_assert!(e.length > 0 && e.offset + e.length <= units, "{e:?} in {units}");
                    for f in &entities[i + 1..] {
                        let (a, b) = ((e.offset, e.offset + e.length), (f.offset, f.offset + f.length));
                        let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
                        let apart = a.1 <= b.0 || b.1 <= a.0;
                        proptest::prop_assert!(nested || apart, "{e:?} and {f:?} overlap");
                        let code = |k: &MessageEntityKind| matches!(k, MessageEntityKind::Code | MessageEntityKind::Pre { .. });
                        if nested && !apart {
                            proptest::prop_assert!(!code(&e.kind) || e.length <= f.length, "inside code: {f:?}");
                        }
                    }
                }
            }
        }
    }
}
