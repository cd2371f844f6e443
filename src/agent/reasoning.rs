//! Reasoning kept out of what is shown and stored. Reasoning models behind
//! OpenAI-compatible servers (Ollama, vLLM, llama.cpp with DeepSeek-R1,
//! Qwen3, QwQ…) write their thinking into the answer text between
//! `<think>` tags, or `[THINK]` for Magistral; some templates open the tag
//! in the prompt, so the answer holds only its `</think>`. Separate
//! reasoning fields (`reasoning_content`, Anthropic's thinking blocks) are
//! never read by the providers at all.

use std::borrow::Cow;

/// Opening and closing spellings, lower case.
const TAGS: [(&str, &str); 3] = [
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("[think]", "[/think]"),
];

/// The first of `needles` in `haystack` at or after `from`: its position
/// and which one.
fn first_of(
    haystack: &str,
    from: usize,
    needles: impl Fn(usize) -> &'static str,
) -> Option<(usize, usize)> {
    (0..TAGS.len())
        .filter_map(|i| haystack[from..].find(needles(i)).map(|at| (from + at, i)))
        .min()
}

/// `text` without its reasoning: every tagged block, a block left open at
/// the end, and everything before a closing tag that was never opened.
/// Returns the text unchanged (borrowed) when there is none.
pub fn strip_reasoning(text: &str) -> Cow<'_, str> {
    // ASCII lower-casing keeps every byte offset.
    let lower = text.to_ascii_lowercase();
    let open = first_of(&lower, 0, |i| TAGS[i].0);
    let close = first_of(&lower, 0, |i| TAGS[i].1);
    if open.is_none() && close.is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = match (open, close) {
        (open, Some((at, i))) if open.is_none_or(|(o, _)| at < o) => at + TAGS[i].1.len(),
        _ => 0,
    };
    while let Some((at, i)) = first_of(&lower, pos, |i| TAGS[i].0) {
        out.push_str(&text[pos..at]);
        let body = at + TAGS[i].0.len();
        match lower[body..].find(TAGS[i].1) {
            Some(end) => pos = body + end + TAGS[i].1.len(),
            // Still thinking when the answer ended: none of it is shown.
            None => {
                pos = text.len();
                break;
            }
        }
    }
    out.push_str(&text[pos..]);
    Cow::Owned(out.trim().to_string())
}

/// `text`, still being written, as it may be shown: [`strip_reasoning`],
/// and without what may be the start of an opening tag at its end (the
/// next words may make it one).
pub fn shown_so_far(text: &str) -> String {
    let shown = strip_reasoning(text);
    let shown = shown.trim_end();
    let longest = TAGS.iter().map(|(open, _)| open.len()).max().unwrap_or(0);
    let tail_start = shown
        .char_indices()
        .rev()
        .nth(longest)
        .map_or(0, |(i, _)| i);
    let tail = shown[tail_start..].to_ascii_lowercase();
    let held = (0..tail.len())
        .filter(|&at| tail.is_char_boundary(at))
        .find(|&at| {
            let end = &tail[at..];
            TAGS.iter()
                .any(|(open, _)| open.len() > end.len() && open.starts_with(end))
        });
    match held {
        Some(at) => shown[..tail_start + at].trim_end().to_string(),
        None => shown.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{shown_so_far, strip_reasoning};
    use proptest::prelude::*;

    #[test]
    fn reasoning_in_every_spelling_goes() {
        for (raw, shown) in [
            ("<think>The user wants 4.</think>\n\nIt is 4.", "It is 4."),
            ("<THINK>loud</THINK>answer", "answer"),
            ("<thinking>a</thinking>one <think>b</think>two", "one two"),
            ("[THINK]plan[/THINK]Done.", "Done."),
            (
                "The template opened it.</think>\nThe answer.",
                "The answer.",
            ),
            ("<think>never closed, the model ran out of tokens", ""),
            (
                "Answer first. <think>then a thought that never ends",
                "Answer first.",
            ),
            ("plain answer", "plain answer"),
        ] {
            assert_eq!(strip_reasoning(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn reasoning_and_a_tag_being_written_are_not_shown_so_far() {
        assert_eq!(shown_so_far("Hello"), "Hello");
        assert_eq!(shown_so_far("<think>hmm"), "");
        assert_eq!(
            shown_so_far("<think>hmm</think>\n\nThe answer"),
            "The answer"
        );
        assert_eq!(shown_so_far("Sure. <thi"), "Sure.");
        assert_eq!(shown_so_far("a < b"), "a < b");
        assert_eq!(shown_so_far("x [th"), "x");
    }

    #[test]
    fn text_without_reasoning_is_not_copied() {
        assert!(matches!(
            strip_reasoning("no tags here"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    proptest! {
        #[test]
        fn no_think_text_survives(
            before in "[a-z ]{0,20}", thought in "[a-z<>/ ]{0,40}", after in "[a-z ]{0,20}",
        ) {
            let raw = format!("{before}<think>SECRET{thought}</think>{after}");
            let shown = strip_reasoning(&raw);
            prop_assert!(!shown.contains("SECRET"), "{raw:?} -> {shown:?}");
        }

        #[test]
        fn never_panics_on_any_text(text in "\\PC{0,200}") {
            let _ = strip_reasoning(&text);
        }
    }
}
