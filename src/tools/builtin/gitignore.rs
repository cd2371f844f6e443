//! The `.gitignore` files `search_files` obeys, read as the agent's other
//! files are: beneath the workspace (a symlink out of it, to `/dev/zero`
//! say, leads nowhere), regular files only (a FIFO would hold the thread
//! for good), their first [`MOST`] bytes, and only those of the workspace's
//! own directories. The ignore crate's own reading follows symlinks, waits
//! on FIFOs, reads without end and looks past the workspace (its parents,
//! the daemon's global excludes): one link named `.gitignore` filled the
//! daemon's memory.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::tools::workspace::open_data_beneath;

/// The most of one `.gitignore` read; past it, its rules are not read.
const MOST: u64 = 256 * 1024;

/// The `.gitignore` rules of the directories under one workspace, each
/// file read once, when a walk first asks about its directory.
#[derive(Debug)]
pub(super) struct Ignored {
    root: PathBuf,
    read: Mutex<HashMap<PathBuf, Option<Arc<Gitignore>>>>,
}

impl Ignored {
    /// The rules of the workspace at `root`.
    pub(super) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            read: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `path` (a directory when `dir`) is ignored: the deepest
    /// `.gitignore` between it and the workspace's root that says anything
    /// of it decides (a `!` rule lets it back in).
    pub(super) fn ignored(&self, path: &Path, dir: bool) -> bool {
        for at in path.ancestors().skip(1) {
            if !at.starts_with(&self.root) {
                break;
            }
            if let Some(rules) = self.of(at) {
                match rules.matched(path, dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
        }
        false
    }

    /// The rules of `dir`'s `.gitignore`, if it has a readable one.
    fn of(&self, dir: &Path) -> Option<Arc<Gitignore>> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        read.entry(dir.to_path_buf())
            .or_insert_with(|| self.load(dir).map(Arc::new))
            .clone()
    }

    fn load(&self, dir: &Path) -> Option<Gitignore> {
        let file = open_data_beneath(&self.root, &dir.join(".gitignore"), false).ok()?;
        let mut bytes = Vec::new();
        file.take(MOST + 1).read_to_end(&mut bytes).ok()?;
        if bytes.len() as u64 > MOST {
            // Cut: its last, partial line is no rule.
            bytes.truncate(MOST as usize);
            let whole = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            bytes.truncate(whole);
        }
        let mut rules = GitignoreBuilder::new(dir);
        for line in String::from_utf8_lossy(&bytes).lines() {
            // A line that is no pattern is skipped, as git does.
            let _ = rules.add_line(None, line);
        }
        rules.build().ok()
    }
}
