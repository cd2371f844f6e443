//! The free space commands leave. A command can fill the filesystem its
//! workspace is on, which is often the database's too: every session's
//! storage then stops, and the files stay after the command. Linux offers a
//! daemon no quota per directory it can count on, so the gateway keeps a
//! reserve instead (`tools.sandbox.disk_reserve_mb`): a running command of
//! the local backend is ended once a filesystem it can write falls below
//! it. One started below it (to remove what an ended one wrote, say) may
//! take [`SLACK`] more; none starts below half of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a running command's filesystems are looked at: at a
/// gigabyte a second a command writes ~100 MiB past its floor before it is
/// ended, well within the default reserve.
const EVERY: Duration = Duration::from_millis(100);

/// What a command started below the reserve may still take.
const SLACK: u64 = 32 << 20;

/// The filesystems one command can write, and the free space it leaves on
/// each.
#[derive(Debug, Clone, Default)]
pub struct Reserve {
    bytes: u64,
    /// Each filesystem, by a path on it, with the free space below which
    /// the command is ended ([`start`](Self::start) sets it).
    paths: Vec<(PathBuf, u64)>,
}

/// Bytes of `path`'s filesystem free to unprivileged writers.
fn free(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    Some(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

impl Reserve {
    /// `bytes` to keep free on the filesystems of `paths` (none: `0`).
    pub fn new(bytes: u64, paths: Vec<PathBuf>) -> Self {
        Self {
            bytes,
            paths: paths.into_iter().map(|p| (p, bytes)).collect(),
        }
    }

    /// Takes the free space as the command starts, each filesystem's floor
    /// the reserve or, below it, [`SLACK`] under what is free now; why the
    /// command may not start when one has less than half the reserve free.
    pub fn start(&mut self) -> Result<(), String> {
        if self.bytes == 0 {
            return Ok(());
        }
        for (path, floor) in &mut self.paths {
            let Some(free) = free(path) else { continue };
            if free < self.bytes / 2 {
                return Err(format!(
                    "the disk holding {} has {} MiB free, less than half of the {} MiB the gateway keeps free for its own storage (tools.sandbox.disk_reserve_mb)",
                    path.display(),
                    free >> 20,
                    self.bytes >> 20
                ));
            }
            *floor = self.bytes.min(free.saturating_sub(SLACK));
        }
        Ok(())
    }

    /// Resolves with the reason once a filesystem's free space falls below
    /// its floor; never without a reserve.
    pub async fn breached(&self) -> String {
        if self.bytes == 0 || self.paths.is_empty() {
            return std::future::pending().await;
        }
        let mut every = tokio::time::interval(EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            for (path, floor) in &self.paths {
                if let Some(free) = free(path).filter(|free| free < floor) {
                    return format!(
                        "the disk holding {} fell to {} MiB free; the gateway keeps {} MiB free for its own storage (tools.sandbox.disk_reserve_mb)",
                        path.display(),
                        free >> 20,
                        self.bytes >> 20
                    );
                }
            }
        }
    }
}
