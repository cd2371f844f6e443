//! The Markdown models write, read once with pulldown-cmark (CommonMark,
//! plus `~~strike~~` and tables) into a small tree of blocks and inline
//! spans, and walked into a platform's [`Sink`]. Whatever CommonMark
//! reads as text (an unmatched `*`, `snake_case`, a backslash escape)
//! reaches the sink as text for it to escape; only matched markup becomes
//! a span, so a sink can never be handed half a span.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// An inline style around some spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Style {
    /// `**bold**`, `__bold__`.
    Bold,
    /// `*italic*`, `_italic_`.
    Italic,
    /// `~~strike~~`.
    Strike,
    /// `[label](url)`, `<url>`, `![alt](url)`.
    Link(String),
}

/// Inline content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inline {
    /// Text, unescaped.
    Text(String),
    /// `` `code` ``, verbatim.
    Code(String),
    /// Styled spans.
    Styled(Style, Vec<Inline>),
    /// A line break inside a block.
    Break,
}

/// A block of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// A paragraph (also a table, a row a line, cells apart by ` | `).
    Para(Vec<Inline>),
    /// `#` to `######`, setext headings too.
    Heading(u8, Vec<Inline>),
    /// Fenced or indented code, verbatim.
    Code {
        /// The fence's language, possibly empty.
        lang: String,
        /// The code, without the final newline.
        code: String,
    },
    /// `> …`.
    Quote(Vec<Block>),
    /// A list: numbered from `start`, or bullets.
    List {
        /// The first number of an ordered list.
        start: Option<u64>,
        /// Each item's blocks.
        items: Vec<Vec<Block>>,
    },
    /// `---`.
    Rule,
}

/// Where a platform's rendering goes: text and spans in, a message out.
pub trait Sink: Default {
    /// The rendered message.
    type Out;
    /// Text, to be escaped as the platform needs.
    fn text(&mut self, s: &str);
    /// An inline code span.
    fn code(&mut self, s: &str);
    /// A style starts.
    fn open(&mut self, style: &Style);
    /// A style ends (the innermost open one).
    fn close(&mut self, style: &Style);
    /// A code block.
    fn code_block(&mut self, lang: &str, code: &str);
    /// A heading starts (`open`) or ends; bold by default.
    fn heading(&mut self, _level: u8, open: bool) {
        if open {
            self.open(&Style::Bold);
        } else {
            self.close(&Style::Bold);
        }
    }
    /// A quote starts or ends.
    fn quote(&mut self, open: bool);
    /// A new line.
    fn newline(&mut self);
    /// The message.
    fn finish(self) -> Self::Out;
}

/// Text with `> ` quote prefixes kept across lines, for sinks that write
/// markup: their `quote` and `newline` in one place.
#[derive(Debug, Default)]
pub struct Quoted {
    /// What was written.
    pub text: String,
    depth: usize,
}

impl Quoted {
    /// A quote starts or ends.
    pub fn quote(&mut self, open: bool) {
        if open {
            self.depth += 1;
            self.text.push_str("> ");
        } else {
            self.depth = self.depth.saturating_sub(1);
        }
    }

    /// A new line, prefixed while in a quote.
    pub fn newline(&mut self) {
        self.text.push('\n');
        if self.depth > 0 {
            self.text.push_str("> ");
        }
    }
}

/// Reads `src` into blocks.
pub fn parse(src: &str) -> Vec<Block> {
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    let mut reader = Reader::default();
    for event in Parser::new_ext(src, options) {
        reader.event(event);
    }
    reader.finish()
}

/// Something being built while reading.
enum Open {
    Para,
    Heading(u8),
    Quote,
    List(Option<u64>, Vec<Vec<Block>>),
    Item,
    Code(String),
    Styled(Style),
    Table,
    Cell,
}

/// One frame of the reader: what is being built, its blocks and spans.
struct Frame {
    open: Open,
    blocks: Vec<Block>,
    inlines: Vec<Inline>,
    code: String,
}

impl Frame {
    fn new(open: Open) -> Self {
        Self {
            open,
            blocks: Vec::new(),
            inlines: Vec::new(),
            code: String::new(),
        }
    }
}

/// Appends `inline`, joining adjacent text.
fn append(inlines: &mut Vec<Inline>, inline: Inline) {
    if let (Some(Inline::Text(prev)), Inline::Text(next)) = (inlines.last_mut(), &inline) {
        prev.push_str(next);
        return;
    }
    inlines.push(inline);
}

struct Reader {
    stack: Vec<Frame>,
}

impl Default for Reader {
    fn default() -> Self {
        Self {
            stack: vec![Frame::new(Open::Quote)],
        }
    }
}

fn level(l: HeadingLevel) -> u8 {
    match l {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

impl Reader {
    fn top(&mut self) -> &mut Frame {
        self.stack.last_mut().expect("the root frame stays")
    }

    fn push_inline(&mut self, inline: Inline) {
        append(&mut self.top().inlines, inline);
    }

    /// Turns loose inlines of a container into a paragraph.
    fn settle(frame: &mut Frame) {
        if !frame.inlines.is_empty() {
            let inlines = std::mem::take(&mut frame.inlines);
            frame.blocks.push(Block::Para(inlines));
        }
    }

    fn push_block(&mut self, block: Block) {
        let top = self.top();
        Self::settle(top);
        top.blocks.push(block);
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => {
                if let Open::Code(_) = self.top().open {
                    self.top().code.push_str(&t);
                } else {
                    self.push_inline(Inline::Text(t.into_string()));
                }
            }
            Event::Code(c) => self.push_inline(Inline::Code(c.into_string())),
            Event::Html(h) | Event::InlineHtml(h) => {
                self.push_inline(Inline::Text(h.into_string()));
            }
            Event::SoftBreak | Event::HardBreak => self.push_inline(Inline::Break),
            Event::Rule => self.push_block(Block::Rule),
            Event::FootnoteReference(r) => self.push_inline(Inline::Text(format!("[^{r}]"))),
            Event::TaskListMarker(done) => {
                self.push_inline(Inline::Text(if done { "[x] " } else { "[ ] " }.into()));
            }
            Event::InlineMath(m) | Event::DisplayMath(m) => {
                self.push_inline(Inline::Code(m.into_string()));
            }
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        let open = match tag {
            Tag::Paragraph => Open::Para,
            Tag::Heading { level: l, .. } => Open::Heading(level(l)),
            Tag::BlockQuote(_) => Open::Quote,
            Tag::CodeBlock(kind) => Open::Code(match kind {
                CodeBlockKind::Fenced(info) => info
                    .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                CodeBlockKind::Indented => String::new(),
            }),
            Tag::List(start) => Open::List(start, Vec::new()),
            Tag::Item => Open::Item,
            Tag::Emphasis => Open::Styled(Style::Italic),
            Tag::Strong => Open::Styled(Style::Bold),
            Tag::Strikethrough => Open::Styled(Style::Strike),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                Open::Styled(Style::Link(dest_url.into_string()))
            }
            Tag::Table(_) => Open::Table,
            Tag::TableHead | Tag::TableRow => {
                if !self.top().inlines.is_empty() {
                    self.push_inline(Inline::Break);
                }
                return;
            }
            Tag::TableCell => Open::Cell,
            // Footnote definitions, HTML blocks, metadata: their content
            // is read as if in a paragraph.
            _ => Open::Para,
        };
        self.stack.push(Frame::new(open));
    }

    fn end(&mut self, tag: TagEnd) {
        if matches!(tag, TagEnd::TableHead | TagEnd::TableRow) {
            return;
        }
        let Some(mut frame) = self.stack.pop() else {
            return;
        };
        if self.stack.is_empty() {
            // An end without its start; keep the root.
            self.stack.push(frame);
            return;
        }
        match frame.open {
            Open::Para => {
                let inlines = frame.inlines;
                self.push_block(Block::Para(inlines));
            }
            Open::Heading(l) => self.push_block(Block::Heading(l, frame.inlines)),
            Open::Code(lang) => {
                let code = frame.code.strip_suffix('\n').unwrap_or(&frame.code);
                self.push_block(Block::Code {
                    lang,
                    code: code.to_string(),
                });
            }
            Open::Quote => {
                Self::settle(&mut frame);
                self.push_block(Block::Quote(frame.blocks));
            }
            Open::Item => {
                Self::settle(&mut frame);
                if let Open::List(_, items) = &mut self.top().open {
                    items.push(frame.blocks);
                }
            }
            Open::List(start, items) => self.push_block(Block::List { start, items }),
            Open::Styled(style) => {
                let mut inner = frame.inlines;
                if let Style::Link(url) = &style
                    && inner.is_empty()
                {
                    inner.push(Inline::Text(url.clone()));
                }
                self.push_inline(Inline::Styled(style, inner));
            }
            Open::Table => {
                Self::settle(&mut frame);
                let inlines = frame.blocks.into_iter().flat_map(|b| match b {
                    Block::Para(i) => i,
                    _ => Vec::new(),
                });
                let row: Vec<Inline> = inlines.collect();
                self.push_block(Block::Para(row));
            }
            Open::Cell => {
                let top = self.top();
                if top
                    .inlines
                    .last()
                    .is_some_and(|i| !matches!(i, Inline::Break))
                {
                    append(&mut top.inlines, Inline::Text(" | ".into()));
                }
                for inline in frame.inlines {
                    append(&mut top.inlines, inline);
                }
            }
        }
    }

    fn finish(mut self) -> Vec<Block> {
        while self.stack.len() > 1 {
            let tag = match self.top().open {
                Open::Para => TagEnd::Paragraph,
                _ => TagEnd::BlockQuote(None),
            };
            self.end(tag);
        }
        let mut root = self.stack.pop().expect("the root frame stays");
        Self::settle(&mut root);
        root.blocks
    }
}

/// Renders inline spans into `sink`.
pub fn inlines<S: Sink>(spans: &[Inline], sink: &mut S) {
    for span in spans {
        match span {
            Inline::Text(t) => sink.text(t),
            Inline::Code(c) => sink.code(c),
            Inline::Break => sink.newline(),
            Inline::Styled(style, inner) => {
                sink.open(style);
                inlines(inner, sink);
                sink.close(style);
            }
        }
    }
}

/// Renders blocks into `sink`, a blank line apart; list items as `• ` or
/// `n. ` lines, nested lists indented.
pub fn blocks<S: Sink>(blocks: &[Block], sink: &mut S) {
    walk(blocks, sink, 0, true);
}

fn walk<S: Sink>(blocks: &[Block], sink: &mut S, depth: usize, loose: bool) {
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            sink.newline();
            if loose {
                sink.newline();
            }
        }
        match block {
            Block::Para(spans) => inlines(spans, sink),
            Block::Heading(level, spans) => {
                sink.heading(*level, true);
                inlines(spans, sink);
                sink.heading(*level, false);
            }
            Block::Code { lang, code } => sink.code_block(lang, code),
            Block::Quote(inner) => {
                sink.quote(true);
                walk(inner, sink, depth, loose);
                sink.quote(false);
            }
            Block::List { start, items } => {
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        sink.newline();
                    }
                    sink.text(&"  ".repeat(depth));
                    match start {
                        Some(first) => sink.text(&format!("{}. ", first + n as u64)),
                        None => sink.text("• "),
                    }
                    walk(item, sink, depth + 1, false);
                }
            }
            Block::Rule => sink.text("──────────"),
        }
    }
}

/// Renders Markdown `src` into a fresh sink.
pub fn to_out<S: Sink>(src: &str) -> S::Out {
    render::<S>(&parse(src))
}

/// Renders a whole document into a fresh sink.
pub fn render<S: Sink>(doc: &[Block]) -> S::Out {
    let mut sink = S::default();
    blocks(doc, &mut sink);
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Inline {
        Inline::Text(s.into())
    }

    #[test]
    fn ordinary_model_output_reads_as_commonmark() {
        assert_eq!(
            parse("__bold__ and ***both*** and \\*not\\*"),
            [Block::Para(vec![
                Inline::Styled(Style::Bold, vec![text("bold")]),
                text(" and "),
                Inline::Styled(
                    Style::Italic,
                    vec![Inline::Styled(Style::Bold, vec![text("both")])]
                ),
                text(" and *not*"),
            ])]
        );
        assert_eq!(
            parse("~~~py\nx = 1\n~~~\n\n    indented\n"),
            [
                Block::Code {
                    lang: "py".into(),
                    code: "x = 1".into()
                },
                Block::Code {
                    lang: String::new(),
                    code: "indented".into()
                }
            ]
        );
        assert_eq!(
            parse("``a`b`` and <https://x.io> and ![cat](https://c.io/cat.png)"),
            [Block::Para(vec![
                Inline::Code("a`b".into()),
                text(" and "),
                Inline::Styled(
                    Style::Link("https://x.io".into()),
                    vec![text("https://x.io")]
                ),
                text(" and "),
                Inline::Styled(
                    Style::Link("https://c.io/cat.png".into()),
                    vec![text("cat")]
                ),
            ])]
        );
        assert_eq!(
            parse("Title\n=====\n\nsnake_case_name 2 * 3"),
            [
                Block::Heading(1, vec![text("Title")]),
                Block::Para(vec![text("snake_case_name 2 * 3")])
            ]
        );
    }

    #[test]
    fn lists_quotes_and_tables_keep_their_shape() {
        assert_eq!(
            parse("- one\n  - two\n3. x"),
            [
                Block::List {
                    start: None,
                    items: vec![vec![
                        Block::Para(vec![text("one")]),
                        Block::List {
                            start: None,
                            items: vec![vec![Block::Para(vec![text("two")])]]
                        }
                    ]]
                },
                Block::List {
                    start: Some(3),
                    items: vec![vec![Block::Para(vec![text("x")])]]
                }
            ]
        );
        assert_eq!(
            parse("> quoted\n\nafter"),
            [
                Block::Quote(vec![Block::Para(vec![text("quoted")])]),
                Block::Para(vec![text("after")])
            ]
        );
        assert_eq!(
            parse("| a | b |\n|---|---|\n| 1 | 2 |"),
            [Block::Para(vec![
                text("a | b"),
                Inline::Break,
                text("1 | 2")
            ])]
        );
    }
}
