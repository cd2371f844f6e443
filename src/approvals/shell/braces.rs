//! Brace lists (`{rm,-rf,x}`, `a{b,c}d`) expanded as the shell expands
//! them, within the command line's expansion budget.

use super::lex::Budget;

/// Most words one brace list expands to.
const MAX_BRACE_WORDS: usize = 64;
/// Longest word whose brace lists are expanded.
const MAX_BRACE_WORD: usize = 4096;

/// `word` with its brace lists expanded (`{a,b}c` → `ac bc`); the word
/// itself when it has none or expands to too many. Every step is paid from
/// `budget`, so nested lists (`{,}{,}{,}…`) cannot make it exponential.
pub(super) fn braces(word: &str, budget: &mut Budget) -> Vec<String> {
    if word.len() > MAX_BRACE_WORD || !budget.take(word.len() + 1) {
        return vec![word.to_string()];
    }
    let Some((open, close)) = brace_list(word) else {
        return vec![word.to_string()];
    };
    let (head, tail) = (&word[..open], &word[close + 1..]);
    let mut out = Vec::new();
    for alternative in split_top(&word[open + 1..close]) {
        for expanded in braces(&format!("{head}{alternative}{tail}"), budget) {
            out.push(expanded);
            if out.len() > MAX_BRACE_WORDS {
                return vec![word.to_string()];
            }
        }
    }
    out
}

/// A `{…}` of `word` holding a comma at its own level (the first to close):
/// its brace indices. One pass over the word.
fn brace_list(word: &str) -> Option<(usize, usize)> {
    let mut open: Vec<(usize, bool)> = Vec::new();
    for (i, b) in word.bytes().enumerate() {
        match b {
            b'{' => open.push((i, false)),
            b',' => {
                if let Some(top) = open.last_mut() {
                    top.1 = true;
                }
            }
            b'}' => {
                if let Some((at, comma)) = open.pop()
                    && comma
                {
                    return Some((at, i));
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` split at its top-level commas.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}
