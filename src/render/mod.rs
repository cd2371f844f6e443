//! Text for platforms: Markdown read once and rendered per platform,
//! long replies split into chunks a platform accepts, streamed answers
//! into the messages they show in, text clipped with a marker, prompts
//! templated from a payload with untrusted text fenced. Adapters render with it; nothing here knows a platform.

pub mod chunk;
pub mod markdown;
pub mod segments;
pub mod template;
pub mod terminal;

/// The first `max` characters of `text`, with a marker when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!("{}… [truncated {rest} chars]", &text[..cut])
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clipping_marks_what_was_cut() {
        let out = super::clip(&"é".repeat(50), 10);
        assert_eq!(out, format!("{}… [truncated 40 chars]", "é".repeat(10)));
        assert_eq!(super::clip("short", 10), "short");
    }
}
