//! The model's Markdown rendered as Telegram MarkdownV2: the spans of
//! [`crate::adapters::markdown`] become entities, headings bold lines, list
//! items bullets; every other special character is escaped, so unbalanced
//! markup shows as typed instead of failing the whole message.

use crate::adapters::markdown::{Inline, Line, lines};

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
    for (i, line) in lines(src).into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match line {
            Line::FenceOpen(lang) => {
                out.push_str("```");
                out.push_str(lang);
            }
            Line::FenceClose => out.push_str("```"),
            Line::Code(code) => escape_code(code, &mut out),
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
            Inline::Text(t) => escape_text(t, out),
            Inline::Code(c) => {
                out.push('`');
                escape_code(c, out);
                out.push('`');
            }
            Inline::Bold(inner) => wrap('*', inner, out),
            Inline::Italic(inner) => wrap('_', inner, out),
            Inline::Strike(inner) => wrap('~', inner, out),
            Inline::Link(text, url) => {
                out.push('[');
                render(text, out);
                out.push_str("](");
                escape_url(url, out);
                out.push(')');
            }
        }
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
