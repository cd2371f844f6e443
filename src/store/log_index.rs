//! A mark of SQLite's write-ahead log that changes with every commit, by
//! any connection or process, read without a connection: the header of the
//! log's index (`-shm`), which holds the count of commits, the last frame
//! and the log's salts, and which SQLite writes in two copies, the second
//! first.
//!
//! The index is read through a descriptor that stays open for the rest of
//! the process. Closing any descriptor of a file drops every POSIX lock the
//! process holds on it, SQLite's included; a process that then opens the
//! database finds no one holding the index, truncates it under this
//! process's mapping (SIGBUS on the next touch) and rebuilds it while this
//! process still writes. SQLite's own descriptors stay open for the same
//! reason (<https://www.sqlite.org/howtocorrupt.html>, section 2.2).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes in one copy of the header of SQLite's write-ahead log index.
const HEADER: usize = 48;

/// What a SQLite write-ahead log looked like ([`crate::store::Store::log_mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMark([u8; HEADER]);

/// The index at `path`'s header, or `None` when it is missing, not a
/// regular file, or caught while it is written (the copies differ).
pub(super) fn mark(path: &Path) -> Option<LogMark> {
    read(path).map(|(header, _)| LogMark(header))
}

/// The index at `path`'s header (as [`mark`]) and the checkpoint's count
/// of frames copied (`nBackfill`, right after the header's two copies).
fn read(path: &Path) -> Option<([u8; HEADER], u32)> {
    let index = open(path)?;
    let mut head = [0; 2 * HEADER + 4];
    index.read_exact_at(&mut head, 0).ok()?;
    let (first, rest) = head.split_at(HEADER);
    let (second, copied) = rest.split_at(HEADER);
    if first != second {
        return None;
    }
    Some((
        first.try_into().ok()?,
        u32::from_ne_bytes(copied.try_into().ok()?),
    ))
}

/// The frames of a write-ahead log, and how many of them a checkpoint
/// copied into the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Frames {
    pub(super) written: u32,
    pub(super) copied: u32,
}

impl Frames {
    pub(super) fn uncopied(self) -> u32 {
        self.written.saturating_sub(self.copied)
    }
}

/// The frames of the write-ahead log whose index is at `path`: the
/// header's last frame (`mxFrame`, at byte 16, in the machine's byte
/// order) and the checkpoint's count. `None` as for [`mark`].
/// <https://www.sqlite.org/walformat.html>
pub(super) fn frames(path: &Path) -> Option<Frames> {
    let (header, copied) = read(path)?;
    Some(Frames {
        written: u32::from_ne_bytes(header[16..20].try_into().ok()?),
        copied,
    })
}

/// The open index at `path`, opened on first use and again only if the
/// path now names another file (the one before is kept open: see the
/// module's comment).
fn open(path: &Path) -> Option<&'static File> {
    static OPEN: Mutex<BTreeMap<PathBuf, &'static File>> = Mutex::new(BTreeMap::new());
    let now = std::fs::metadata(path).ok()?;
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(file) = open.get(path)
        && file
            .metadata()
            .is_ok_and(|m| (m.dev(), m.ino()) == (now.dev(), now.ino()))
    {
        return Some(file);
    }
    // Non-blocking, so that a FIFO put at the path cannot hang the open.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let file: &'static File = Box::leak(Box::new(file));
    open.insert(path.to_path_buf(), file);
    Some(file)
}
