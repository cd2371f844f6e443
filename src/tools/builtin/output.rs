//! Bounded buffers for command output: a head-and-tail capture for
//! foreground commands and a ring log with offsets for background ones.

use std::collections::VecDeque;

/// Keeps the first and last bytes of a stream, counting what falls between.
#[derive(Debug)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    dropped: u64,
}

impl HeadTail {
    /// A capture that keeps at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: (limit / 2).max(1),
            dropped: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.half {
            let take = (self.half - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        for &b in bytes {
            if self.tail.len() == self.half {
                self.tail.pop_front();
                self.dropped += 1;
            }
            self.tail.push_back(b);
        }
    }

    /// The captured text, with a marker where bytes were dropped.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        if self.dropped == 0 {
            format!("{head}{tail}")
        } else {
            format!(
                "{head}\n… [{} bytes of output omitted] …\n{tail}",
                self.dropped
            )
        }
    }
}

/// The last `capacity` bytes of a stream, addressed by absolute offset so a
/// reader can ask for "everything since offset N".
#[derive(Debug)]
pub struct RingLog {
    buf: VecDeque<u8>,
    start: u64,
    capacity: usize,
}

impl RingLog {
    /// A log keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            start: 0,
            capacity: capacity.max(1),
        }
    }

    /// Appends bytes, dropping the oldest beyond capacity.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend(bytes);
        let excess = self.buf.len().saturating_sub(self.capacity);
        self.buf.drain(..excess);
        self.start += excess as u64;
    }

    /// Offset just past the newest byte.
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Text written since `offset`, the new offset, and whether some of it
    /// was already dropped.
    pub fn since(&self, offset: u64) -> (String, u64, bool) {
        let lost = offset < self.start;
        let skip = offset.saturating_sub(self.start) as usize;
        let bytes: Vec<u8> = self.buf.iter().skip(skip).copied().collect();
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            self.end(),
            lost,
        )
    }

    /// The last `lines` lines kept.
    pub fn tail_lines(&self, lines: usize) -> String {
        let bytes: Vec<u8> = self.buf.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn head_tail_keeps_both_ends() {
        let mut c = HeadTail::new(10);
        c.push(b"0123456789abcdefghij");
        let text = c.render();
        assert!(text.starts_with("01234"));
        assert!(text.ends_with("fghij"));
        assert!(text.contains("[10 bytes of output omitted]"));
    }

    #[test]
    fn ring_log_reads_since_offsets() {
        let mut log = RingLog::new(8);
        log.push(b"hello ");
        let (first, at, lost) = log.since(0);
        assert_eq!((first.as_str(), at, lost), ("hello ", 6, false));
        log.push(b"world!");
        let (next, at, lost) = log.since(6);
        assert_eq!((next.as_str(), at, lost), ("world!", 12, false));
        let (_, _, lost) = log.since(0);
        assert!(lost, "early bytes were dropped");
    }

    proptest! {
        #[test]
        fn head_tail_never_exceeds_its_limit(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..32), limit in 2usize..128) {
            let mut c = HeadTail::new(limit);
            let mut total = 0u64;
            for chunk in &chunks {
                c.push(chunk);
                total += chunk.len() as u64;
            }
            prop_assert!(c.head.len() + c.tail.len() <= limit);
            prop_assert_eq!(c.head.len() as u64 + c.tail.len() as u64 + c.dropped, total);
        }
    }
}
