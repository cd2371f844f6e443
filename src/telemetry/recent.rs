//! The latest warnings and errors logged, kept in memory for the operator
//! console's overview (the log itself stays the record).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// How many are kept.
const KEEP: usize = 50;
/// Longest line kept.
const LINE: usize = 400;

static RECENT: Mutex<VecDeque<Problem>> = Mutex::new(VecDeque::new());

/// One warning or error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// When (Unix ms).
    pub at: i64,
    /// `WARN` or `ERROR`.
    pub level: &'static str,
    /// Where from (the module).
    pub target: String,
    /// The message and its fields.
    pub text: String,
}

/// The latest warnings and errors, newest first.
pub fn recent_problems() -> Vec<Problem> {
    RECENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .rev()
        .cloned()
        .collect()
}

/// Keeps warnings and errors for [`recent_problems`].
pub struct Recent;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if self.0.len() >= LINE {
            return;
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?} ");
        } else {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
            self.0.push(' ');
        } else {
            self.record_debug(field, &value);
        }
    }
}

impl<S: Subscriber> Layer<S> for Recent {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        let problem = Problem {
            at: crate::store::now_ms(),
            level: if level == Level::ERROR {
                "ERROR"
            } else {
                "WARN"
            },
            target: event.metadata().target().to_string(),
            text: crate::render::clip(line.0.trim_end(), LINE),
        };
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == KEEP {
            recent.pop_front();
        }
        recent.push_back(problem);
    }
}
