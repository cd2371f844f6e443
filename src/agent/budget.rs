//! The iteration budget: how many model calls one turn may make.

use std::sync::atomic::{AtomicU32, Ordering};

/// Model calls a main agent's turn may make.
pub const MAIN_AGENT_BUDGET: u32 = 90;
/// Model calls a sub-agent may make.
pub const SUB_AGENT_BUDGET: u32 = 50;

/// A thread-safe countdown of model calls, with refunds for calls that
/// should not count (a retry after malformed output).
#[derive(Debug)]
pub struct IterationBudget {
    remaining: AtomicU32,
    limit: u32,
}

impl IterationBudget {
    /// A budget of `limit` calls.
    pub fn new(limit: u32) -> Self {
        Self {
            remaining: AtomicU32::new(limit),
            limit,
        }
    }

    /// Takes one call; false when none is left.
    pub fn consume(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Gives one call back (never above the limit).
    pub fn refund(&self) {
        let _ = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limit).then_some(n + 1)
            });
    }

    /// Calls left.
    pub fn remaining(&self) -> u32 {
        self.remaining.load(Ordering::SeqCst)
    }

    /// Calls used.
    pub fn used(&self) -> u32 {
        self.limit - self.remaining()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn consume_and_refund_across_threads() {
        let budget = Arc::new(IterationBudget::new(1000));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let b = budget.clone();
                std::thread::spawn(move || (0..200).filter(|_| b.consume()).count())
            })
            .collect();
        let taken: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(taken, 1000, "never more than the limit");
        assert!(!budget.consume());
        budget.refund();
        assert!(budget.consume());
        for _ in 0..2000 {
            budget.refund();
        }
        assert_eq!(budget.remaining(), 1000, "refunds stop at the limit");
    }
}
