//! The Markdown models write, read once into lines and inline spans that
//! each platform renders in its own dialect (Telegram MarkdownV2, Slack
//! mrkdwn). Only matched markup becomes a span: `**bold**`, `*italic*` /
//! `_italic_` (not inside words), `~~strike~~`, `` `code` ``,
//! `[text](url)`; everything else is text for the renderer to escape.

/// One line of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line<'a> {
    /// A fence opening, with its language (possibly empty).
    FenceOpen(&'a str),
    /// A fence closing.
    FenceClose,
    /// A line inside a fence, verbatim.
    Code(&'a str),
    /// `# …` to `###### …`.
    Heading(Vec<Inline<'a>>),
    /// `- …`, `* …` or `+ …`, with its indentation.
    Item(&'a str, Vec<Inline<'a>>),
    /// Anything else.
    Text(Vec<Inline<'a>>),
}

/// An inline span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inline<'a> {
    /// Plain text, unescaped.
    Text(&'a str),
    /// `` `code` ``.
    Code(&'a str),
    /// `**bold**`.
    Bold(Vec<Inline<'a>>),
    /// `*italic*` or `_italic_`.
    Italic(Vec<Inline<'a>>),
    /// `~~strike~~`.
    Strike(Vec<Inline<'a>>),
    /// `[text](url)` with a scheme and no spaces in the URL.
    Link(Vec<Inline<'a>>, &'a str),
}

/// The lines of `src`; a fence left open is closed at the end.
pub fn lines(src: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in src.split('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            if in_fence {
                out.push(Line::FenceClose);
            } else {
                let lang_len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-'))
                    .unwrap_or(rest.len());
                out.push(Line::FenceOpen(&rest[..lang_len]));
            }
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            out.push(Line::Code(line));
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            out.push(Line::Heading(inline(trimmed[hashes..].trim())));
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(item) = ["- ", "* ", "+ "]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p))
        {
            out.push(Line::Item(indent, inline(item)));
            continue;
        }
        out.push(Line::Text(inline(line)));
    }
    if in_fence {
        out.push(Line::FenceClose);
    }
    out
}

fn wordish(c: Option<char>) -> bool {
    c.is_some_and(char::is_alphanumeric)
}

/// Where `delim` closes a span in `s` that neither starts nor ends with a
/// space (and, for word-bound markers, is not followed by a letter).
fn closing(s: &str, delim: &str, word_bound: bool) -> Option<usize> {
    let mut from = 0;
    while let Some(pos) = s[from..].find(delim) {
        let at = from + pos;
        let inner = &s[..at];
        let padded = inner.starts_with(' ') || inner.ends_with(' ');
        let glued = word_bound && wordish(s[at + delim.len()..].chars().next());
        if !(inner.is_empty() || padded || glued) {
            return Some(at);
        }
        from = at + delim.len();
    }
    None
}

/// The `)` closing a link target, allowing balanced parentheses inside it.
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

/// The spans of one line.
pub fn inline(s: &str) -> Vec<Inline<'_>> {
    spans(s, false)
}

fn spans<'a>(s: &'a str, in_link: bool) -> Vec<Inline<'a>> {
    let mut out = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    let mut prev: Option<char> = None;
    let flush = |out: &mut Vec<Inline<'a>>, from: usize, to: usize| {
        if from < to {
            out.push(Inline::Text(&s[from..to]));
        }
    };
    while i < s.len() {
        let rest = &s[i..];
        let c = rest.chars().next().unwrap_or_default();
        if c == '`'
            && let Some(end) = rest[1..].find('`')
        {
            flush(&mut out, text_start, i);
            out.push(Inline::Code(&rest[1..1 + end]));
            i += end + 2;
            text_start = i;
            prev = Some('`');
            continue;
        }
        let mut matched = false;
        for (delim, word_bound) in [("**", false), ("~~", false), ("*", true), ("_", true)] {
            if !rest.starts_with(delim) || (word_bound && wordish(prev)) {
                continue;
            }
            let body = &rest[delim.len()..];
            if let Some(end) = closing(body, delim, word_bound) {
                flush(&mut out, text_start, i);
                let inner = spans(&body[..end], in_link);
                out.push(match delim {
                    "**" => Inline::Bold(inner),
                    "~~" => Inline::Strike(inner),
                    _ => Inline::Italic(inner),
                });
                i += 2 * delim.len() + end;
                text_start = i;
                prev = Some('*');
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
            if !text.is_empty() && url.contains(':') && !url.contains(char::is_whitespace) {
                flush(&mut out, text_start, i);
                out.push(Inline::Link(spans(text, true), url));
                i += close + 3 + end;
                text_start = i;
                prev = Some(')');
                continue;
            }
        }
        i += c.len_utf8();
        prev = Some(c);
    }
    flush(&mut out, text_start, s.len());
    out
}

/// A platform's way of writing the spans.
pub trait Dialect {
    /// Marks around bold, italic and struck-through text.
    const MARKS: (char, char, char);
    /// Appends plain text, escaped.
    fn text(s: &str, out: &mut String);
    /// Appends the inside of a code span or block, escaped.
    fn code(s: &str, out: &mut String);
    /// Appends a fence opening for `lang`.
    fn fence(lang: &str, out: &mut String);
    /// Appends a link whose text is already rendered.
    fn link(label: &str, url: &str, out: &mut String);
}

/// Renders `src` in dialect `D`: headings as bold lines, list items as
/// bullets, fences closed if left open.
pub fn render<D: Dialect>(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + src.len() / 8);
    for (i, line) in lines(src).into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match line {
            Line::FenceOpen(lang) => D::fence(lang, &mut out),
            Line::FenceClose => out.push_str("```"),
            Line::Code(code) => D::code(code, &mut out),
            Line::Heading(spans) => {
                out.push(D::MARKS.0);
                render_spans::<D>(&spans, &mut out);
                out.push(D::MARKS.0);
            }
            Line::Item(indent, spans) => {
                out.push_str(indent);
                out.push_str("• ");
                render_spans::<D>(&spans, &mut out);
            }
            Line::Text(spans) => render_spans::<D>(&spans, &mut out),
        }
    }
    out
}

fn render_spans<D: Dialect>(spans: &[Inline<'_>], out: &mut String) {
    for span in spans {
        let wrap = |mark: char, inner: &[Inline<'_>], out: &mut String| {
            out.push(mark);
            render_spans::<D>(inner, out);
            out.push(mark);
        };
        match span {
            Inline::Text(t) => D::text(t, out),
            Inline::Code(c) => {
                out.push('`');
                D::code(c, out);
                out.push('`');
            }
            Inline::Bold(inner) => wrap(D::MARKS.0, inner, out),
            Inline::Italic(inner) => wrap(D::MARKS.1, inner, out),
            Inline::Strike(inner) => wrap(D::MARKS.2, inner, out),
            Inline::Link(text, url) => {
                let mut label = String::new();
                render_spans::<D>(text, &mut label);
                D::link(&label, url, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_nest_and_unmatched_markers_stay_text() {
        assert_eq!(
            inline("**a _b_** and `c*d`"),
            vec![
                Inline::Bold(vec![
                    Inline::Text("a "),
                    Inline::Italic(vec![Inline::Text("b")])
                ]),
                Inline::Text(" and "),
                Inline::Code("c*d"),
            ]
        );
        assert_eq!(
            inline("snake_case_name"),
            vec![Inline::Text("snake_case_name")]
        );
        assert_eq!(inline("2 * 3"), vec![Inline::Text("2 * 3")]);
        assert_eq!(
            inline("[w](https://en.wikipedia.org/wiki/Rust_(language))"),
            vec![Inline::Link(
                vec![Inline::Text("w")],
                "https://en.wikipedia.org/wiki/Rust_(language)"
            )]
        );
    }

    #[test]
    fn lines_know_fences_headings_and_items() {
        assert_eq!(
            lines("# T\n- x\n```rs\ncode\n"),
            vec![
                Line::Heading(vec![Inline::Text("T")]),
                Line::Item("", vec![Inline::Text("x")]),
                Line::FenceOpen("rs"),
                Line::Code("code"),
                Line::Code(""),
                Line::FenceClose,
            ]
        );
    }
}
