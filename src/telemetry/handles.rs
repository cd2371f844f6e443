//! Metric handles kept by their label values. A handle looked up by its
//! labels (`metrics::counter!(name, "route" => …)`) allocates the labels
//! and hashes them into the registry each time; the events on every
//! request's path take theirs from here, made once per label set.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// The handles of one metric (or of a few recorded together), by a text
/// label value and up to two more from small closed sets (a method, an
/// outcome, a status code). The label values must come from bounded sets,
/// as every metric's do.
pub(super) struct Handles<H>(LazyLock<Mutex<ByText<H>>>);

/// Handles by their text label, then their tag and code.
type ByText<H> = HashMap<String, Vec<(&'static str, u16, H)>>;

impl<H: Clone> Handles<H> {
    pub(super) const fn new() -> Self {
        Self(LazyLock::new(Mutex::default))
    }

    /// The handle for `(text, tag, code)`, made by `make` the first time
    /// (after the process's recorder is installed, so that it is never a
    /// handle of no recorder).
    pub(super) fn get(
        &self,
        text: &str,
        tag: &'static str,
        code: u16,
        make: impl FnOnce() -> H,
    ) -> H {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let kept = match all.get_mut(text) {
            Some(kept) => kept,
            None => all.entry(text.to_string()).or_default(),
        };
        if let Some((_, _, handle)) = kept.iter().find(|(t, c, _)| *t == tag && *c == code) {
            return handle.clone();
        }
        super::metrics();
        let handle = make();
        kept.push((tag, code, handle.clone()));
        handle
    }
}
