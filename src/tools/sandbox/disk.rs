//! The free space commands leave. A command can fill the filesystem its
//! workspace is on, which is often the database's too, with data or with
//! empty files: every session's storage then stops, and the files stay after
//! the command. Linux offers a daemon no quota per directory it can count
//! on, so the gateway keeps a reserve instead (`tools.sandbox`'s
//! `disk_reserve_mb` and `disk_reserve_inodes`): a running command of the
//! local backend is ended once a filesystem it can write falls below it.
//! One started below it (to remove what an ended one wrote, say) may take
//! [`SLACK`] more; none starts below half of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a running command's filesystems are looked at: at a
/// gigabyte a second a command writes ~100 MiB past its floor before it is
/// ended, well within the default reserve. (`fallocate`, which takes
/// space without writing it, is refused by the seccomp filter.)
const EVERY: Duration = Duration::from_millis(100);

/// What a command started below the reserve may still take.
const SLACK: Free = Free {
    bytes: 32 << 20,
    inodes: 1024,
};

/// What a filesystem has free to unprivileged writers, or is to keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Free {
    /// Bytes.
    pub bytes: u64,
    /// Inodes: files, directories, links.
    pub inodes: u64,
}

/// What `path`'s filesystem has free; inodes without a count (btrfs)
/// are as many as wanted.
fn free(path: &Path) -> Option<Free> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    Some(Free {
        bytes: stat.blocks_available().saturating_mul(stat.fragment_size()),
        inodes: match stat.files() {
            0 => u64::MAX,
            _ => stat.files_available(),
        },
    })
}

/// The filesystems one command can write, and the free space it leaves on
/// each.
#[derive(Debug, Clone, Default)]
pub struct Reserve {
    keep: Free,
    /// Each filesystem, by a path on it, with the free space below which
    /// the command is ended ([`start`](Self::start) sets it).
    paths: Vec<(PathBuf, Free)>,
}

impl Reserve {
    /// `keep` free on the filesystems of `paths` (a zero keeps none).
    pub fn new(keep: Free, paths: Vec<PathBuf>) -> Self {
        Self {
            keep,
            paths: paths.into_iter().map(|p| (p, keep)).collect(),
        }
    }

    /// Takes the free space as the command starts, each filesystem's floor
    /// the reserve or, below it, [`SLACK`] under what is free now; why the
    /// command may not start when one has less than half the reserve free.
    pub fn start(&mut self) -> Result<(), String> {
        let keep = self.keep;
        for (path, floor) in &mut self.paths {
            let Some(free) = free(path) else { continue };
            if free.bytes < keep.bytes / 2 {
                return Err(format!(
                    "the disk holding {} has {} MiB free, less than half of the {} MiB the gateway keeps free for its own storage (tools.sandbox.disk_reserve_mb)",
                    path.display(),
                    free.bytes >> 20,
                    keep.bytes >> 20
                ));
            }
            if free.inodes < keep.inodes / 2 {
                return Err(format!(
                    "the disk holding {} has room for {} more files, less than half of the {} the gateway keeps for its own storage (tools.sandbox.disk_reserve_inodes)",
                    path.display(),
                    free.inodes,
                    keep.inodes
                ));
            }
            *floor = Free {
                bytes: keep.bytes.min(free.bytes.saturating_sub(SLACK.bytes)),
                inodes: keep.inodes.min(free.inodes.saturating_sub(SLACK.inodes)),
            };
        }
        Ok(())
    }

    /// Resolves with the reason once a filesystem's free space falls below
    /// its floor; never without a reserve.
    pub async fn breached(&self) -> String {
        if self.keep == Free::default() || self.paths.is_empty() {
            return std::future::pending().await;
        }
        let mut every = tokio::time::interval(EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            for (path, floor) in &self.paths {
                let Some(free) = free(path) else { continue };
                if free.bytes < floor.bytes {
                    return format!(
                        "the disk holding {} fell to {} MiB free; the gateway keeps {} MiB free for its own storage (tools.sandbox.disk_reserve_mb)",
                        path.display(),
                        free.bytes >> 20,
                        self.keep.bytes >> 20
                    );
                }
                if free.inodes < floor.inodes {
                    return format!(
                        "the disk holding {} fell to room for {} more files; the gateway keeps room for {} for its own storage (tools.sandbox.disk_reserve_inodes)",
                        path.display(),
                        free.inodes,
                        self.keep.inodes
                    );
                }
            }
        }
    }
}
