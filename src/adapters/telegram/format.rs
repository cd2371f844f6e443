//! The model's Markdown rendered as Telegram MarkdownV2: the spans of
//! [`crate::render::markdown`] become entities, headings bold lines, list
//! items bullets; every other special character is escaped, so unbalanced
//! markup shows as typed instead of failing the whole message.

use crate::render::markdown::{Dialect, render};

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

struct MarkdownV2;

impl Dialect for MarkdownV2 {
    const MARKS: (char, char, char) = ('*', '_', '~');

    fn text(s: &str, out: &mut String) {
        escape_text(s, out);
    }

    fn code(s: &str, out: &mut String) {
        escape_code(s, out);
    }

    fn fence(lang: &str, out: &mut String) {
        out.push_str("```");
        out.push_str(lang);
    }

    fn link(label: &str, url: &str, out: &mut String) {
        out.push('[');
        out.push_str(label);
        out.push_str("](");
        escape_url(url, out);
        out.push(')');
    }
}

/// Renders `src` as MarkdownV2.
pub fn markdown_v2(src: &str) -> String {
    render::<MarkdownV2>(src)
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
