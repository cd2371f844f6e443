//! Splitting long replies for platforms with a message limit: on paragraph
//! boundaries first, then lines, then words; a code fence cut in two is
//! closed at the end of one chunk and reopened (with its language) at the
//! start of the next; with more than one chunk each ends in `(i/n)`.

/// Room kept for the `\n(i/n)` marker.
const MARKER_ROOM: usize = 12;

/// Splits `text` into chunks of at most `limit` units as counted by
/// `measure` (UTF-16 units for Telegram, characters elsewhere).
pub fn split(text: &str, limit: usize, measure: fn(&str) -> usize) -> Vec<String> {
    let text = text.trim_end();
    if measure(text) <= limit {
        return vec![text.to_string()];
    }
    let budget = limit.saturating_sub(MARKER_ROOM).max(16);
    let mut chunks = pack(text, budget, measure);
    let n = chunks.len();
    if n > 1 {
        for (i, chunk) in chunks.iter_mut().enumerate() {
            chunk.push_str(&format!("\n({}/{n})", i + 1));
        }
    }
    chunks
}

/// Counts characters.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Counts UTF-16 code units (Telegram's measure).
pub fn utf16(s: &str) -> usize {
    s.encode_utf16().count()
}

fn fence_opener(line: &str) -> Option<&str> {
    line.trim_start().starts_with("```").then_some(line.trim())
}

struct Packer<'a> {
    budget: usize,
    measure: fn(&str) -> usize,
    chunks: Vec<String>,
    current: String,
    /// Index in `current` just after the last blank line outside a fence,
    /// with the fence state there (always "outside").
    last_paragraph: Option<usize>,
    fence: Option<&'a str>,
}

impl<'a> Packer<'a> {
    fn len(&self, s: &str) -> usize {
        (self.measure)(s)
    }

    fn room_for(&self, line: &str) -> bool {
        let closer = if self.fence.is_some() { 4 } else { 0 };
        let sep = usize::from(!self.current.is_empty());
        self.len(&self.current) + sep + self.len(line) + closer <= self.budget
    }

    fn push_line(&mut self, line: &str) {
        if !self.current.is_empty() {
            self.current.push('\n');
        }
        self.current.push_str(line);
    }

    /// Ends the current chunk, preferring the last paragraph break.
    fn cut(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let half = self.len(&self.current) / 2;
        if let Some(at) = self.last_paragraph.take()
            && self.fence.is_none()
            && self.len(&self.current[..at]) >= half
        {
            let rest = self.current[at..].trim_start_matches('\n').to_string();
            let head = self.current[..at].trim_end().to_string();
            self.chunks.push(head);
            self.current = rest;
            return;
        }
        let mut done = std::mem::take(&mut self.current);
        if let Some(opener) = self.fence {
            done.push_str("\n```");
            self.current = opener.to_string();
        }
        self.chunks.push(done.trim_end().to_string());
    }

    fn add(&mut self, line: &'a str) {
        let opener = fence_opener(line);
        if !self.room_for(line) {
            self.cut();
        }
        if !self.room_for(line) {
            // Still too long on its own: split by words, then characters.
            for piece in split_long(line, self.budget.saturating_sub(8).max(8), self.measure) {
                if !self.room_for(&piece) {
                    self.cut();
                }
                self.push_line(&piece);
            }
        } else {
            self.push_line(line);
        }
        match (opener, self.fence) {
            (Some(_), Some(_)) => self.fence = None,
            (Some(o), None) => self.fence = Some(o),
            _ => {}
        }
        if line.trim().is_empty() && self.fence.is_none() {
            self.last_paragraph = Some(self.current.len());
        }
    }
}

fn split_long(line: &str, budget: usize, measure: fn(&str) -> usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for word in line.split_inclusive(' ') {
        if measure(&cur) + measure(word) > budget && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        if measure(word) > budget {
            for c in word.chars() {
                if measure(&cur) + measure(c.encode_utf8(&mut [0; 4])) > budget {
                    out.push(std::mem::take(&mut cur));
                }
                cur.push(c);
            }
        } else {
            cur.push_str(word);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn pack(text: &str, budget: usize, measure: fn(&str) -> usize) -> Vec<String> {
    let mut p = Packer {
        budget,
        measure,
        chunks: Vec::new(),
        current: String::new(),
        last_paragraph: None,
        fence: None,
    };
    for line in text.split('\n') {
        p.add(line);
    }
    if !p.current.trim().is_empty() {
        let last = std::mem::take(&mut p.current);
        p.chunks.push(last.trim_end().to_string());
    }
    p.chunks.retain(|c| !c.trim().is_empty());
    p.chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_chunk_without_marker() {
        assert_eq!(split("hello", 100, chars), ["hello"]);
    }

    #[test]
    fn paragraphs_are_kept_whole_when_they_fit() {
        let para = "word ".repeat(30).trim_end().to_string();
        let text = format!("{para}\n\n{para}\n\n{para}");
        let chunks = split(&text, 400, chars);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        for c in &chunks {
            assert!(chars(c) <= 400);
        }
        assert!(chunks[0].ends_with("(1/2)"));
        assert!(chunks[1].starts_with("word"));
    }

    #[test]
    fn code_fences_are_closed_and_reopened() {
        let code: Vec<String> = (0..80).map(|i| format!("let x{i} = {i};")).collect();
        let text = format!("Here:\n```rust\n{}\n```\nDone.", code.join("\n"));
        let chunks = split(&text, 500, chars);
        assert!(chunks.len() > 2);
        for (i, c) in chunks.iter().enumerate() {
            assert!(chars(c) <= 500, "chunk {i} too long");
            let fences = c
                .lines()
                .filter(|l| l.trim_start().starts_with("```"))
                .count();
            assert_eq!(fences % 2, 0, "chunk {i} leaves a fence open: {c}");
            if i > 0 && i + 1 < chunks.len() {
                assert!(
                    c.starts_with("```rust"),
                    "chunk {i} reopens with the language"
                );
            }
        }
        let joined: String = chunks.concat();
        assert!(joined.contains("let x79 = 79;") && joined.contains("Done."));
    }

    #[test]
    fn utf16_limits_count_astral_characters_twice() {
        let text = "😀".repeat(3000);
        let chunks = split(&text, 4096, utf16);
        assert!(chunks.len() >= 2);
        for c in &chunks {
            assert!(utf16(c) <= 4096);
        }
        let emoji: usize = chunks
            .iter()
            .map(|c| c.chars().filter(|ch| *ch == '😀').count())
            .sum();
        assert_eq!(emoji, 3000, "nothing lost");
    }
}
