//! The model's Markdown for Discord, which renders Markdown itself: only
//! what Discord lacks is rewritten. Headings deeper than `###` become bold
//! lines, an unclosed fence is closed, and untrusted text shown in a code
//! block cannot close it. Pings are prevented where messages are sent
//! (`allowed_mentions`), not by mangling the text.

/// Renders `src` for a Discord message.
pub fn render(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 8);
    let mut in_fence = false;
    for (i, line) in src.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            out.push_str(line);
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if !in_fence && (4..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            out.push_str("**");
            out.push_str(trimmed[hashes..].trim());
            out.push_str("**");
            continue;
        }
        out.push_str(line);
    }
    if in_fence {
        out.push_str("\n```");
    }
    out
}

/// `text` in a code block it cannot break out of.
pub fn code_block(text: &str) -> String {
    format!("```\n{}\n```", text.replace("```", "ˋˋˋ"))
}

#[cfg(test)]
mod tests {
    use super::{code_block, render};

    #[test]
    fn discord_keeps_markdown_and_fixes_what_it_lacks() {
        assert_eq!(
            render("## Plan\n**bold** and `code`"),
            "## Plan\n**bold** and `code`"
        );
        assert_eq!(render("#### Deep\ntext"), "**Deep**\ntext");
        assert_eq!(
            render("```sh\n#### not a heading"),
            "```sh\n#### not a heading\n```"
        );
        assert_eq!(render("#hashtag stays"), "#hashtag stays");
    }

    #[test]
    fn code_blocks_cannot_be_closed_from_inside() {
        let block = code_block("echo ```\n@everyone");
        assert_eq!(block.matches("```").count(), 2);
        assert!(block.ends_with("@everyone\n```"));
    }
}
