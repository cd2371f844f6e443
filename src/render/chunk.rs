//! Splitting long replies for platforms with a message limit. The
//! Markdown is read once; chunks are made of whole blocks, packed while
//! they fit. Only a block too long for one message is split inside: a
//! code block between lines (each piece fenced again), a list between
//! items, a quote between its blocks, a paragraph between words with
//! every style it is in closed at the end of one piece and opened again at
//! the start of the next, so no chunk holds half a span. With more than
//! one chunk each ends in `(i/n)`.

use super::markdown::{self, Block, Inline, Sink, Style};

/// Room kept for the `(i/n)` marker paragraph.
const MARKER_ROOM: usize = 14;
/// The separator between blocks, in units.
const BLOCK_SEP: usize = 2;

/// A platform's way of rendering: its sink, and how long a message is in
/// the unit its limit counts.
pub trait Dialect {
    /// Where blocks are rendered.
    type Sink: Sink;
    /// The length of a rendered message in the limit's unit.
    fn size(out: &<Self::Sink as Sink>::Out) -> usize;
}

/// A dialect whose messages are markup text counted in characters.
pub struct CharCount<S>(std::marker::PhantomData<S>);

impl<S: Sink<Out = String>> Dialect for CharCount<S> {
    type Sink = S;
    fn size(out: &String) -> usize {
        chars(out)
    }
}

/// Counts characters.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Counts UTF-16 code units (Telegram's measure).
pub fn utf16(s: &str) -> usize {
    s.encode_utf16().count()
}

fn size<D: Dialect>(doc: &[Block]) -> usize {
    D::size(&markdown::render::<D::Sink>(doc))
}

/// Renders `src` in chunks of at most `limit` units each (as far as a
/// single character allows), each marked `(i/n)` when there are several.
pub fn chunks<D: Dialect>(src: &str, limit: usize) -> Vec<<D::Sink as Sink>::Out> {
    split::<D>(src, limit, true)
}

/// [`chunks`] for a dialect of text; without `markers`, the pieces of one
/// message (Slack's section blocks). Markup that renders to nothing but
/// blanks (link reference definitions alone) is shown as written, in a
/// code block: no platform takes a message without text.
pub fn text_parts<D>(src: &str, limit: usize, markers: bool) -> Vec<String>
where
    D: Dialect,
    D::Sink: Sink<Out = String>,
{
    let mut parts = split::<D>(src, limit, markers);
    let written = src.trim();
    if written.is_empty() {
        return parts;
    }
    // A block that renders to nothing (an empty table) may be a piece of
    // its own: a platform refuses the whole message for it.
    parts.retain(|p| !p.trim().is_empty());
    if !parts.is_empty() {
        return parts;
    }
    let code = Block::Code {
        lang: String::new(),
        code: written.to_string(),
    };
    split_doc::<D>(vec![code], limit, markers)
}

fn split<D: Dialect>(src: &str, limit: usize, markers: bool) -> Vec<<D::Sink as Sink>::Out> {
    split_doc::<D>(markdown::parse(src), limit, markers)
}

fn split_doc<D: Dialect>(
    doc: Vec<Block>,
    limit: usize,
    markers: bool,
) -> Vec<<D::Sink as Sink>::Out> {
    if size::<D>(&doc) <= limit {
        return vec![markdown::render::<D::Sink>(&doc)];
    }
    let room = if markers { MARKER_ROOM } else { 0 };
    let budget = limit.saturating_sub(room).max(16);
    let pieces: Vec<Block> = doc.into_iter().flat_map(|b| fit::<D>(b, budget)).collect();
    let mut groups: Vec<Vec<Block>> = Vec::new();
    let mut current: Vec<Block> = Vec::new();
    let mut used = 0;
    for piece in pieces {
        let n = size::<D>(std::slice::from_ref(&piece));
        let extra = if current.is_empty() { n } else { n + BLOCK_SEP };
        if !current.is_empty() && used + extra > budget {
            groups.push(std::mem::take(&mut current));
            used = 0;
            current.push(piece);
            used += n;
        } else {
            current.push(piece);
            used += extra;
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    let n = groups.len();
    groups
        .into_iter()
        .enumerate()
        .map(|(i, mut group)| {
            if markers && n > 1 {
                group.push(Block::Para(vec![Inline::Text(format!("({}/{n})", i + 1))]));
            }
            markdown::render::<D::Sink>(&group)
        })
        .collect()
}

/// `block` as one or more blocks that each fit `budget`.
fn fit<D: Dialect>(block: Block, budget: usize) -> Vec<Block> {
    if size::<D>(std::slice::from_ref(&block)) <= budget {
        return vec![block];
    }
    match block {
        Block::Code { lang, code } => split_code::<D>(&lang, &code, budget),
        Block::List { start, items } => {
            let mut out = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                let one = Block::List {
                    start: start.map(|s| s + i as u64),
                    items: vec![item],
                };
                if size::<D>(std::slice::from_ref(&one)) <= budget {
                    out.push(one);
                } else if let Block::List { mut items, .. } = one {
                    // An item too long for a message loses its bullet.
                    let blocks = items.pop().unwrap_or_default();
                    out.extend(blocks.into_iter().flat_map(|b| fit::<D>(b, budget)));
                }
            }
            out
        }
        Block::Quote(inner) => {
            // Every line of a quote takes its prefix: a piece of many lines
            // needs more room than the first guess leaves.
            let mut room = budget.saturating_sub(4).max(16);
            loop {
                let pieces: Vec<Block> = (inner.iter().cloned())
                    .flat_map(|b| fit::<D>(b, room))
                    .map(|b| Block::Quote(vec![b]))
                    .collect();
                let over = (pieces.iter())
                    .map(|p| size::<D>(std::slice::from_ref(p)))
                    .max()
                    .unwrap_or(0)
                    .saturating_sub(budget);
                if over == 0 || room == 16 {
                    return pieces;
                }
                room = room.saturating_sub(over).max(16);
            }
        }
        Block::Para(spans) => split_spans::<D>(spans, budget, Block::Para),
        Block::Heading(level, spans) => {
            split_spans::<D>(spans, budget, |s| Block::Heading(level, s))
        }
        Block::Rule => vec![Block::Rule],
    }
}

fn split_code<D: Dialect>(lang: &str, code: &str, budget: usize) -> Vec<Block> {
    // Every piece is fenced again with the language: one that takes more
    // than half a message is left off, or no piece could fit.
    let bare = Block::Code {
        lang: lang.to_string(),
        code: String::new(),
    };
    let lang = if size::<D>(&[bare]) > budget / 2 {
        ""
    } else {
        lang
    };
    let block = |code: String| Block::Code {
        lang: lang.to_string(),
        code,
    };
    let fits = |code: &str| size::<D>(&[block(code.to_string())]) <= budget;
    let lines: Vec<&str> = code.split('\n').collect();
    let mut out = Vec::new();
    let mut rest = &lines[..];
    while let Some(line) = rest.first() {
        let n = longest(rest.len().min(budget.max(1)), |n| {
            fits(&rest[..n].join("\n"))
        });
        if n > 0 {
            out.push(block(rest[..n].join("\n")));
            rest = &rest[n..];
            continue;
        }
        for piece in split_text(line, budget, fits) {
            out.push(block(piece));
        }
        rest = &rest[1..];
    }
    if out.is_empty() {
        out.push(block(String::new()));
    }
    out
}

/// The longest prefixes of `text` that `fits`, one after another, cut
/// between characters. Every character takes at least one unit, so no
/// prefix longer than `budget` characters is tried.
fn split_text(text: &str, budget: usize, fits: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let bounds: Vec<usize> = rest
            .char_indices()
            .map(|(i, _)| i)
            .skip(1)
            .chain([rest.len()])
            .take(budget.max(1))
            .collect();
        // At least one character per piece, however narrow the budget.
        let take = bounds[longest(bounds.len(), |n| fits(&rest[..bounds[n - 1]])).max(1) - 1];
        out.push(rest[..take].to_string());
        rest = &rest[take..];
    }
    out
}

/// The largest `n` in `1..=most` for which `fits(n)` holds, or 0; `fits`
/// must hold for every `n` below one where it holds. Binary search, so a
/// long run costs a logarithmic number of renderings, not one per item.
fn longest(most: usize, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, most);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// A word (or break) with the styles it is in.
#[derive(Clone)]
struct Token {
    styles: Vec<Style>,
    kind: TokenKind,
}

#[derive(Clone)]
enum TokenKind {
    Text(String),
    Code(String),
    Break,
}

fn tokens(spans: &[Inline], styles: &mut Vec<Style>, out: &mut Vec<Token>) {
    for span in spans {
        match span {
            Inline::Text(t) => {
                // Words keep the space after them, so pieces join back
                // into the same text.
                let mut start = 0;
                for (i, c) in t.char_indices() {
                    if c.is_whitespace() {
                        let end = i + c.len_utf8();
                        out.push(Token {
                            styles: styles.clone(),
                            kind: TokenKind::Text(t[start..end].to_string()),
                        });
                        start = end;
                    }
                }
                if start < t.len() {
                    out.push(Token {
                        styles: styles.clone(),
                        kind: TokenKind::Text(t[start..].to_string()),
                    });
                }
            }
            Inline::Code(c) => out.push(Token {
                styles: styles.clone(),
                kind: TokenKind::Code(c.clone()),
            }),
            Inline::Break => out.push(Token {
                styles: styles.clone(),
                kind: TokenKind::Break,
            }),
            Inline::Styled(style, inner) => {
                styles.push(style.clone());
                tokens(inner, styles, out);
                styles.pop();
            }
        }
    }
}

/// Spans again from tokens: each token wrapped in its styles, neighbours
/// in the same styles sharing them.
fn spans(tokens: &[Token]) -> Vec<Inline> {
    fn build(tokens: &[Token], depth: usize) -> Vec<Inline> {
        let mut out: Vec<Inline> = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let t = &tokens[i];
            if t.styles.len() > depth {
                let style = &t.styles[depth];
                let mut j = i;
                while j < tokens.len()
                    && tokens[j].styles.len() > depth
                    && tokens[j].styles[..=depth] == t.styles[..=depth]
                {
                    j += 1;
                }
                out.push(Inline::Styled(
                    style.clone(),
                    build(&tokens[i..j], depth + 1),
                ));
                i = j;
                continue;
            }
            match &t.kind {
                TokenKind::Text(s) => match out.last_mut() {
                    Some(Inline::Text(prev)) => prev.push_str(s),
                    _ => out.push(Inline::Text(s.clone())),
                },
                TokenKind::Code(c) => out.push(Inline::Code(c.clone())),
                TokenKind::Break => out.push(Inline::Break),
            }
            i += 1;
        }
        out
    }
    build(tokens, 0)
}

fn split_spans<D: Dialect>(
    spans_in: Vec<Inline>,
    budget: usize,
    wrap: impl Fn(Vec<Inline>) -> Block,
) -> Vec<Block> {
    let mut all = Vec::new();
    tokens(&spans_in, &mut Vec::new(), &mut all);
    let fits = |tokens: &[Token]| size::<D>(&[wrap(spans(tokens))]) <= budget;
    let mut out = Vec::new();
    let mut rest: &[Token] = &all;
    while let Some(token) = rest.first() {
        // Each token takes at least one unit: no more than `budget` fit.
        let n = longest(rest.len().min(budget.max(1)), |n| fits(&rest[..n]));
        if n > 0 {
            out.push(wrap(spans(&rest[..n])));
            rest = &rest[n..];
            continue;
        }
        rest = &rest[1..];
        // One word longer than a message: cut it between characters.
        let (text, code) = match &token.kind {
            TokenKind::Text(t) => (t.clone(), false),
            TokenKind::Code(c) => (c.clone(), true),
            TokenKind::Break => continue,
        };
        let piece = |styles: &[Style], p: &str| Token {
            styles: styles.to_vec(),
            kind: if code {
                TokenKind::Code(p.to_string())
            } else {
                TokenKind::Text(p.to_string())
            },
        };
        // A link whose address alone is longer than a message cannot be
        // sent at all: its text goes on without it.
        let mut styles = token.styles.clone();
        let first = text.chars().next().map(String::from).unwrap_or_default();
        if !fits(&[piece(&styles, &first)]) {
            styles.retain(|s| !matches!(s, Style::Link(_)));
        }
        let piece = |p: &str| piece(&styles, p);
        for p in split_text(&text, budget, |p| fits(&[piece(p)])) {
            out.push(wrap(spans(&[piece(&p)])));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The document written back as CommonMark, for tests: text escaped,
    /// spans as `**`, `*`, `~~`, `[..](..)`, so reading a chunk again
    /// shows exactly which spans it holds.
    #[derive(Default)]
    pub(crate) struct Plain(String);

    fn fence_for(s: &str, min: usize) -> String {
        let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
        "`".repeat(min.max(longest + 1))
    }

    impl Sink for Plain {
        type Out = String;
        fn text(&mut self, s: &str) {
            for c in s.chars() {
                if c.is_ascii_punctuation() {
                    self.0.push('\\');
                }
                self.0.push(c);
            }
        }
        fn code(&mut self, s: &str) {
            let fence = fence_for(s, 1);
            self.0.push_str(&format!("{fence} {s} {fence}"));
        }
        fn open(&mut self, style: &Style) {
            self.0.push_str(match style {
                Style::Bold => "**",
                Style::Italic => "*",
                Style::Strike => "~~",
                Style::Link(_) => "[",
            });
        }
        fn close(&mut self, style: &Style) {
            match style {
                Style::Bold => self.0.push_str("**"),
                Style::Italic => self.0.push('*'),
                Style::Strike => self.0.push_str("~~"),
                Style::Link(url) => {
                    self.0.push_str("](<");
                    self.0.push_str(url);
                    self.0.push_str(">)");
                }
            }
        }
        fn code_block(&mut self, lang: &str, code: &str) {
            let fence = fence_for(code, 3);
            self.0.push_str(&format!("{fence}{lang}\n{code}\n{fence}"));
        }
        fn quote(&mut self, open: bool) {
            if open {
                self.0.push_str("> ");
            }
        }
        fn newline(&mut self) {
            self.0.push('\n');
        }
        fn finish(self) -> String {
            self.0
        }
    }

    /// Every word of a document with the styles it is in (headings count
    /// as bold, as the sinks render them).
    pub(crate) fn styled_words(blocks: &[Block]) -> Vec<(String, Vec<String>)> {
        fn spans(s: &[Inline], styles: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
            for i in s {
                match i {
                    Inline::Text(t) => {
                        for w in t.split_whitespace() {
                            out.push((w.to_string(), styles.clone()));
                        }
                    }
                    Inline::Code(c) => {
                        for w in c.split_whitespace() {
                            out.push((
                                w.to_string(),
                                [styles.clone(), vec!["code".into()]].concat(),
                            ));
                        }
                    }
                    Inline::Break => {}
                    Inline::Styled(style, inner) => {
                        let name = match style {
                            Style::Bold => "bold".to_string(),
                            Style::Italic => "italic".into(),
                            Style::Strike => "strike".into(),
                            Style::Link(url) => format!("link {url}"),
                        };
                        styles.push(name);
                        spans(inner, styles, out);
                        styles.pop();
                    }
                }
            }
        }
        let mut out = Vec::new();
        for b in blocks {
            match b {
                Block::Para(s) => spans(s, &mut Vec::new(), &mut out),
                Block::Heading(_, s) => spans(s, &mut vec!["bold".into()], &mut out),
                Block::Quote(inner) => out.extend(styled_words(inner)),
                Block::List { items, .. } => {
                    for item in items {
                        out.extend(styled_words(item));
                    }
                }
                Block::Code { code, .. } => {
                    for w in code.split_whitespace() {
                        out.push((w.to_string(), vec!["block".into()]));
                    }
                }
                Block::Rule => {}
            }
        }
        out
    }

    fn split(text: &str, limit: usize) -> Vec<String> {
        chunks::<CharCount<Plain>>(text, limit)
    }

    #[test]
    fn short_text_is_one_chunk_without_marker() {
        assert_eq!(split("hello **there**!", 100), ["hello **there**\\!"]);
    }

    #[test]
    fn whole_blocks_are_packed_while_they_fit() {
        let text = format!(
            "{}\n\n{}\n\n{}",
            "a".repeat(40),
            "b".repeat(40),
            "c".repeat(40)
        );
        let parts = split(&text, 100);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert_eq!(
            parts[0],
            format!("{}\n\n{}\n\n\\(1\\/2\\)", "a".repeat(40), "b".repeat(40))
        );
        assert_eq!(parts[1], format!("{}\n\n\\(2\\/2\\)", "c".repeat(40)));
    }

    #[test]
    fn code_blocks_split_between_lines_and_are_fenced_again() {
        let code: Vec<String> = (0..30).map(|i| format!("line {i:02}")).collect();
        let text = format!("```rust\n{}\n```", code.join("\n"));
        let parts = split(&text, 120);
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.starts_with("```rust\n"), "{p}");
            assert!(chars(p) <= 120, "{p}");
            assert_eq!(p.matches("```").count(), 2, "{p}");
        }
        let joined: Vec<&str> = parts
            .iter()
            .flat_map(|p| p.lines().filter(|l| l.starts_with("line")))
            .collect();
        assert_eq!(joined, code);
    }

    #[test]
    fn a_long_paragraph_splits_between_words_reopening_its_styles() {
        let text = format!("**{}**", "word ".repeat(60).trim());
        let parts = split(&text, 80);
        assert!(parts.len() > 2);
        for p in &parts {
            let body = p.rsplit_once("\n\n").map_or(p.as_str(), |(b, _)| b);
            assert!(body.starts_with("**word") && body.ends_with("**"), "{p}");
            assert!(chars(p) <= 80);
        }
    }

    #[test]
    fn utf16_counts_astral_characters_twice() {
        assert_eq!(utf16("a😀"), 3);
        assert_eq!(chars("a😀"), 2);
    }

    /// Checks that `parts` (a platform's way of splitting an answer) makes
    /// text of markup that renders to nothing: every platform refuses a
    /// message without text.
    pub(crate) fn never_blank(parts: impl Fn(&str) -> Vec<String>) {
        for src in [
            "~~~sh\n\n~~~",
            "```\n   \n```",
            "<!-- a comment -->",
            "[](https://x.io)",
            "![](https://x.io/a.png)",
            "***",
            "<br>",
            "[^1]: note",
            "[docs]: https://x.io/a_b\n[more]: <https://y.io> \"t\"",
            "| |\n|-|",
        ] {
            let parts = parts(src);
            assert!(!parts.is_empty(), "{src:?}");
            for part in parts {
                assert!(!part.trim().is_empty(), "{src:?} gave {part:?}");
            }
        }
    }

    /// Markdown of the kinds models write, for the renderers' properties.
    pub(crate) fn markdownish() -> impl Strategy<Value = String> {
        let word = prop_oneof![
            4 => "[a-z]{1,12}",
            1 => "[a-z]{1,6}".prop_map(|w| format!("**{w}**")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("__{w}__")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("*{w}*")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("***{w}***")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("~~{w}~~")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("`{w}`")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("``{w}`{w}``")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("[{w}](https://x.io/{w})")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("![{w}](https://x.io/{w}.png)")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("<https://x.io/{w}>")),
            1 => "[a-z]{1,6}".prop_map(|w| format!("\\*{w}\\*")),
            1 => "[a-z]{1,4}_[a-z]{1,4}",
            1 => Just("a<b&c>d".to_string()),
            1 => Just("😀".to_string()),
        ];
        let para = proptest::collection::vec(word, 1..40).prop_map(|w| w.join(" "));
        let code = proptest::collection::vec("[a-z `~]{0,30}", 1..20)
            .prop_map(|l| format!("```\n{}\n```", l.join("\n")));
        let tilde = proptest::collection::vec("[a-z ]{0,30}", 1..6)
            .prop_map(|l| format!("~~~sh\n{}\n~~~", l.join("\n")));
        let indented = proptest::collection::vec("[a-z]{1,20}", 1..5)
            .prop_map(|l| format!("    {}", l.join("\n    ")));
        let item = proptest::collection::vec("[a-z]{1,8}", 1..6)
            .prop_map(|w| format!("- {}", w.join(" ")));
        let heading = "[a-z]{1,10}( [a-z]{1,10}){0,3}".prop_map(|h| format!("## {h}"));
        let setext = "[a-z]{1,10}".prop_map(|h| format!("{h}\n====="));
        let quote = "[a-z]{1,10}( [a-z]{1,10}){0,6}".prop_map(|q| format!("> {q}"));
        let block = prop_oneof![4 => para, 1 => code, 1 => tilde, 1 => indented, 1 => item, 1 => heading, 1 => setext, 1 => quote];
        proptest::collection::vec(block, 1..12).prop_map(|b| b.join("\n\n"))
    }

    proptest! {
        #[test]
        fn every_chunk_fits_and_no_span_is_cut(text in markdownish(), limit in 80usize..400) {
            let parts = split(&text, limit);
            let mut words = Vec::new();
            for p in &parts {
                prop_assert!(chars(p) <= limit, "{} > {limit}: {p:?}", chars(p));
                // Each chunk is Markdown on its own: read again, every word
                // is in the same styles as in the whole.
                words.extend(styled_words(&markdown::parse(p)));
            }
            words.retain(|(w, s)| {
                !(s.is_empty() && (w == "•" || (w.starts_with('(') && w.ends_with(')') && w.contains('/'))))
            });
            prop_assert_eq!(words, styled_words(&markdown::parse(&text)));
        }
    }
}
