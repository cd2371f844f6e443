//! Splitting an answer that streams into a chat into the messages it shows
//! in. Unlike [`chunks`](super::chunk::chunks) the pieces are Markdown
//! source (each platform renders one when it edits its message) and carry
//! no `(i/n)` marker, since nobody knows `n` while the answer is written.
//! A piece ends at a block boundary where one is near its end (a blank
//! line, else a line break, else a space); a code block cut in two is
//! closed at the end of one piece and opened again, with its language, at
//! the start of the next.
//!
//! The split of a text's start depends on nothing after it, so as an
//! answer grows its earlier pieces stay as they were: a message filled
//! once is not edited again until the answer is complete.

/// Share of a message's limit a piece may fill: the rest is room for the
/// progress line shown under the last piece while the answer streams.
const FILL_PERCENT: usize = 90;
/// The fewest characters a piece is cut to, however wide the rendering.
const NARROWEST: usize = 16;

/// `src` in pieces whose rendering, measured by `size` in the unit of
/// `limit`, fits a message with room to spare. Empty text has no pieces.
pub fn segments(src: &str, limit: usize, size: impl Fn(&str) -> usize) -> Vec<String> {
    let room = (limit * FILL_PERCENT / 100).max(NARROWEST);
    let mut out = Vec::new();
    let mut rest = src.trim().to_string();
    while !rest.is_empty() {
        if size(&rest) <= room {
            if open_fence(&rest).is_some() {
                // Still being written: the block ends here for now.
                rest.push_str("\n```");
            }
            out.push(rest);
            break;
        }
        let mut window = room;
        let (piece, next) = loop {
            let (piece, next) = cut(&rest, window);
            if size(&piece) <= room || window <= NARROWEST {
                break (piece, next);
            }
            window = (window * 3 / 4).max(NARROWEST);
        };
        out.push(piece);
        rest = next;
    }
    out
}

/// `text` cut within its first `window` characters: the piece (its open
/// code block closed) and what follows (the code block opened again).
fn cut(text: &str, window: usize) -> (String, String) {
    let end = text
        .char_indices()
        .nth(window)
        .map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    let near = |i: &usize| *i >= end / 2 && *i > 0;
    let (stop, resume) = head
        .rfind("\n\n")
        .filter(near)
        .map(|i| (i, i + 2))
        .or_else(|| head.rfind('\n').filter(near).map(|i| (i, i + 1)))
        .or_else(|| head.rfind(' ').filter(near).map(|i| (i, i + 1)))
        .unwrap_or((end, end));
    let mut piece = text[..stop].trim_end().to_string();
    let after = &text[resume..];
    match open_fence(&piece) {
        Some(opening) => {
            piece.push_str("\n```");
            let next = format!("{opening}\n{}", after.trim_start_matches('\n'));
            (piece, next)
        }
        None => (piece, after.trim_start().to_string()),
    }
}

/// The opening line of a fenced code block `text` leaves open.
fn open_fence(text: &str) -> Option<String> {
    let mut open: Option<(&str, &str)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        match open {
            None => {
                for fence in ["```", "~~~"] {
                    if trimmed.starts_with(fence) {
                        open = Some((fence, trimmed.trim_end()));
                        break;
                    }
                }
            }
            Some((fence, _)) => {
                let mark = fence.as_bytes()[0] as char;
                if trimmed.starts_with(fence) && trimmed.trim_end().trim_matches(mark).is_empty() {
                    open = None;
                }
            }
        }
    }
    open.map(|(_, line)| line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::chunk::chars;

    #[test]
    fn short_text_is_one_piece_and_empty_text_none() {
        assert_eq!(segments("  hello  ", 100, chars), vec!["hello"]);
        assert!(segments(" \n ", 100, chars).is_empty());
    }

    #[test]
    fn pieces_end_at_paragraphs_and_fit() {
        let para = "word ".repeat(30);
        let text = [para.trim(), para.trim(), para.trim(), para.trim()].join("\n\n");
        let pieces = segments(&text, 400, chars);
        assert!(pieces.len() > 1, "{pieces:?}");
        for p in &pieces {
            assert!(chars(p) <= 360, "{} chars", chars(p));
            assert!(p.ends_with("word"), "{p:?}");
        }
        assert_eq!(pieces.join(" ").split_whitespace().count(), 120);
    }

    #[test]
    fn a_code_block_cut_in_two_is_closed_and_opened_again() {
        let code: Vec<String> = (0..60).map(|i| format!("let x{i} = {i};")).collect();
        let text = format!("Here:\n\n```rust\n{}\n```\n\nDone.", code.join("\n"));
        let pieces = segments(&text, 300, chars);
        assert!(pieces.len() > 2, "{pieces:?}");
        for p in &pieces {
            assert!(open_fence(p).is_none(), "left open: {p:?}");
        }
        assert!(pieces[1].starts_with("```rust\n"), "{:?}", pieces[1]);
        let lines: usize = pieces
            .iter()
            .map(|p| p.lines().filter(|l| l.starts_with("let ")).count())
            .sum();
        assert_eq!(lines, 60);
    }

    #[test]
    fn a_growing_text_keeps_its_earlier_pieces() {
        let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
        let mut before: Vec<String> = Vec::new();
        for n in (10..400).step_by(7) {
            let text = words[..n].join(" ");
            let now = segments(&text, 200, chars);
            for (i, piece) in before
                .iter()
                .enumerate()
                .take(before.len().saturating_sub(1))
            {
                assert_eq!(&now[i], piece, "piece {i} changed at {n} words");
            }
            before = now;
        }
    }

    #[test]
    fn a_wide_rendering_gets_narrower_pieces() {
        // Every character renders as two.
        let text = "ab".repeat(500);
        let pieces = segments(&text, 200, |s| 2 * chars(s));
        assert!(pieces.iter().all(|p| 2 * chars(p) <= 180), "{pieces:?}");
        assert_eq!(pieces.concat(), text);
    }
}
