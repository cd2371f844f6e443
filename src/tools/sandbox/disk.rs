//! The free space commands leave. A command can fill the filesystem its
//! workspace is on, which is often the database's too, with data or with
//! empty files: every session's storage then stops, and the files stay after
//! the command. Linux offers a daemon no quota per directory it can count
//! on, so the gateway keeps a reserve instead (`tools.sandbox`'s
//! `disk_reserve_mb` and `disk_reserve_inodes`): a running command of the
//! local backend is ended once a filesystem it can write falls below it.
//! One started below it (to remove what an ended one wrote, say) may take
//! [`SLACK`] more, down to half of it, no further. Below half of it a
//! command may only remove: it runs with a file size limit of zero and
//! maps no file shared (a write through such a mapping knows no file size
//! limit), and may take [`CLEANING`] more.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a running command's filesystems are looked at, far from the
/// floor and near it (within twice the reserve): at 3 GB a second, what
/// this machine's two cores wrote through `mmap` and `copy_file_range`, a
/// command gets ~30 MiB past its floor.
const FAR: Duration = Duration::from_millis(100);
const NEAR: Duration = Duration::from_millis(10);

/// What a command started below the reserve may still take.
const SLACK: Free = Free {
    bytes: 32 << 20,
    inodes: 1024,
};

/// What a command started below half the reserve may take: others write
/// meanwhile (the gateway's storage too), and a command without a file
/// size can still make directories and links.
const CLEANING: Free = Free {
    bytes: 1 << 20,
    inodes: 64,
};

/// The floor of one measure (bytes or inodes) for a command started with
/// `free`: the reserve `keep`; below it, `slack` under what is free, never
/// below half of it; below half of it, `cleaning` under what is free (or
/// half of what is, when less), never nothing while anything is free.
fn floor_of(keep: u64, free: u64, slack: u64, cleaning: u64) -> u64 {
    if keep == 0 {
        0
    } else if free >= keep / 2 {
        keep.min(free.saturating_sub(slack).max(keep / 2))
    } else {
        free - cleaning.min(free / 2)
    }
}

/// What a filesystem has free to unprivileged writers, or is to keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Free {
    /// Bytes.
    pub bytes: u64,
    /// Inodes: files, directories, links.
    pub inodes: u64,
}

impl Free {
    fn below(self, floor: Free) -> bool {
        self.bytes < floor.bytes || self.inodes < floor.inodes
    }
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

/// Why commands writing under `dir` (or its nearest existing ancestor)
/// are held back now: its filesystem has less free than `keep`, so a
/// command that writes is ended soon after it starts (and below half of
/// `keep`, may only remove files).
pub fn short_of(keep: Free, dir: &Path) -> Option<String> {
    let on = dir.ancestors().find(|d| d.exists())?;
    let free = free(on)?;
    let short = if free.bytes < keep.bytes {
        format!(
            "{} MiB free, less than the {} MiB commands must leave (tools.sandbox.disk_reserve_mb)",
            free.bytes >> 20,
            keep.bytes >> 20
        )
    } else if free.inodes < keep.inodes {
        format!(
            "room for {} more files, less than the {} commands must leave (tools.sandbox.disk_reserve_inodes)",
            free.inodes, keep.inodes
        )
    } else {
        return None;
    };
    Some(format!(
        "the disk holding {} has {short}: a command that writes there is ended, and below half of it commands may only remove files; free some space or lower the reserve",
        dir.display()
    ))
}

/// The filesystems one command can write, and the free space it leaves on
/// each.
#[derive(Debug, Clone, Default)]
pub struct Reserve {
    keep: Free,
    /// Each filesystem, by a path on it, with the free space below which
    /// the command is ended ([`start`](Self::start) sets it).
    paths: Vec<(PathBuf, Free)>,
    /// Why the command may only remove, when it may.
    removing_only: Option<String>,
}

impl Reserve {
    /// `keep` free on the filesystems of `paths` (a zero keeps none).
    pub fn new(keep: Free, paths: Vec<PathBuf>) -> Self {
        Self {
            keep,
            paths: paths.into_iter().map(|p| (p, keep)).collect(),
            removing_only: None,
        }
    }

    /// Takes the free space as the command is made, each filesystem's
    /// floor by [`floor_of`]; below half of the reserve the command may only
    /// remove ([`removing_only`](Self::removing_only)).
    pub fn start(&mut self) {
        let keep = self.keep;
        for (path, floor) in &mut self.paths {
            let Some(free) = free(path) else { continue };
            let short = if free.bytes < keep.bytes / 2 {
                Some(format!(
                    "{} MiB free, less than half of the {} MiB the gateway keeps free for its own storage (tools.sandbox.disk_reserve_mb)",
                    free.bytes >> 20,
                    keep.bytes >> 20
                ))
            } else if free.inodes < keep.inodes / 2 {
                Some(format!(
                    "room for {} more files, less than half of the {} the gateway keeps for its own storage (tools.sandbox.disk_reserve_inodes)",
                    free.inodes, keep.inodes
                ))
            } else {
                None
            };
            if let Some(short) = short {
                self.removing_only.get_or_insert_with(|| {
                    format!(
                        "the disk holding {} has {short}: this command could remove files but not write them",
                        path.display()
                    )
                });
            }
            *floor = Free {
                bytes: floor_of(keep.bytes, free.bytes, SLACK.bytes, CLEANING.bytes),
                inodes: floor_of(keep.inodes, free.inodes, SLACK.inodes, CLEANING.inodes),
            };
        }
    }

    /// Why the command may only remove files (it runs with a file size
    /// limit of zero), when the disk is that full.
    pub fn removing_only(&self) -> Option<&str> {
        self.removing_only.as_deref()
    }

    /// Resolves with the reason once a filesystem's free space falls below
    /// its floor; never without a reserve.
    pub async fn breached(&self) -> String {
        if self.keep == Free::default() || self.paths.is_empty() {
            return std::future::pending().await;
        }
        loop {
            let mut wait = FAR;
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
                let near = Free {
                    bytes: floor
                        .bytes
                        .saturating_add(self.keep.bytes.saturating_mul(2)),
                    inodes: floor
                        .inodes
                        .saturating_add(self.keep.inodes.saturating_mul(2)),
                };
                if free.below(near) {
                    wait = NEAR;
                }
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_command_takes_a_floor_below_half_the_reserve_and_none_is_nothing() {
        const MIB: u64 = 1 << 20;
        let floor = |free| floor_of(512 * MIB, free * MIB, 32 * MIB, MIB) as f64 / MIB as f64;
        assert_eq!(floor(10_000), 512.0);
        assert_eq!(floor(530), 498.0);
        // Command after command below the reserve, each taking its slack:
        // half of it holds.
        assert_eq!(floor(280), 256.0);
        assert_eq!(floor(256), 256.0);
        assert_eq!(floor(255), 254.0);
        assert_eq!(floor(1), 0.5);
        assert_eq!(floor_of(512 * MIB, 0, 32 * MIB, MIB), 0);
        assert_eq!(floor_of(0, 10 * MIB, 32 * MIB, MIB), 0);
    }
}
