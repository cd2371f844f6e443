//! Keys seen lately, each for a while, in a bounded map: the sessions found
//! owned by another replica.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys noted less than `keep` ago; at most `most` of them (past that the
/// expired go, and if none has, all).
#[derive(Debug)]
pub(super) struct Recent {
    keep: Duration,
    most: usize,
    seen: Mutex<HashMap<String, Instant>>,
}

impl Recent {
    pub(super) fn new(keep: Duration, most: usize) -> Self {
        Self {
            keep,
            most,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `key` was noted less than `keep` ago.
    pub(super) fn holds(&self, key: &str) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(key).is_some_and(|at| at.elapsed() < self.keep)
    }

    /// Notes `key` now; false when it was noted less than `keep` ago
    /// already (that time then stands).
    pub(super) fn note(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen
            .get(key)
            .is_some_and(|at| now.duration_since(*at) < self.keep)
        {
            return false;
        }
        if seen.len() >= self.most {
            seen.retain(|_, at| now.duration_since(*at) < self.keep);
            if seen.len() >= self.most {
                seen.clear();
            }
        }
        seen.insert(key.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_for_its_while_and_the_map_stays_bounded() {
        let recent = Recent::new(Duration::from_secs(60), 3);
        assert!(recent.note("a"));
        assert!(!recent.note("a"), "noted already");
        assert!(recent.holds("a"));
        assert!(!recent.holds("b"));
        for key in ["b", "c", "d"] {
            assert!(recent.note(key));
        }
        // Full of live keys: they went, and the newest stays.
        assert!(recent.holds("d"));
        assert!(!recent.holds("a"));
        let brief = Recent::new(Duration::ZERO, 3);
        assert!(brief.note("a"));
        assert!(brief.note("a"), "its while is over");
        assert!(!brief.holds("a"));
    }
}
