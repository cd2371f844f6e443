//! The bubblewrap command line of one command: new namespaces (the network's
//! too unless `network = true`), the system mounted read-only with hidden
//! paths covered, a fresh `/proc` of the command's own pid namespace, a
//! minimal `/dev`, the session's workspace read-write at its own path and
//! its private temporary directory as `/tmp` (and as `/dev/shm`); nothing
//! else writable (the file systems in memory it makes are
//! remounted read-only).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Dirs, Policy};

/// `bin … -- program args` for a command in `dirs` under `policy`.
pub(super) fn command(
    bin: &str,
    can: Features,
    policy: &Policy,
    dirs: Dirs<'_>,
    program: &str,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]);
    if can.disables_userns {
        cmd.args(["--unshare-user", "--disable-userns"]);
    }
    if policy.network {
        cmd.arg("--share-net");
    }
    for root in &policy.read_roots {
        match std::fs::read_link(root) {
            Ok(target) => {
                cmd.arg("--symlink").arg(target).arg(root);
            }
            Err(_) if root.exists() => {
                cmd.arg("--ro-bind").arg(root).arg(root);
            }
            Err(_) => {}
        }
    }
    // The file systems in memory bubblewrap makes: read-only once every
    // mount point on them is made, or a command could fill the host's
    // memory through them (the root's and `/dev`'s are as large as it).
    let mut memory = vec![Path::new("/"), Path::new("/dev")];
    for hidden in &policy.hidden {
        let under_a_root = policy
            .read_roots
            .iter()
            .filter_map(|r| r.canonicalize().ok())
            .any(|r| hidden.starts_with(r));
        if !under_a_root {
            continue;
        }
        if hidden.is_dir() {
            cmd.arg("--tmpfs").arg(hidden);
            memory.push(hidden.as_path());
        } else if hidden.exists() {
            cmd.arg("--ro-bind").arg("/dev/null").arg(hidden);
        }
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev"]);
    // POSIX semaphores and shared memory live in /dev/shm (Python's
    // `multiprocessing.Lock`): there they are the private temporary
    // directory's files, on its disk under the reserve (a tmpfs would be
    // the host's memory, its files without a bound).
    cmd.arg("--bind").arg(dirs.tmp).arg("/dev/shm");
    // /tmp first: a workspace under /tmp is then mounted over it, not hidden
    // by it.
    cmd.arg("--bind").arg(dirs.tmp).arg("/tmp");
    cmd.arg("--bind").arg(dirs.workspace).arg(dirs.workspace);
    for dir in &policy.read_write {
        if dir.exists() {
            cmd.arg("--bind").arg(dir).arg(dir);
        }
    }
    // (One under a later mount is out of reach, and gone from the tree.)
    let later: Vec<&Path> = [Path::new("/tmp"), dirs.workspace]
        .into_iter()
        .chain(policy.read_write.iter().map(PathBuf::as_path))
        .collect();
    for dir in memory {
        if !later.iter().any(|above| dir.starts_with(above)) {
            cmd.arg("--remount-ro").arg(dir);
        }
    }
    cmd.arg("--chdir")
        .arg(dirs.workdir)
        .arg("--")
        .arg(program)
        .args(args)
        .current_dir(Path::new("/"));
    cmd
}

/// What a bubblewrap binary can do, read from its `--help` when the sandbox
/// is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Features {
    /// Keep a command from making user namespaces of its own
    /// (`--disable-userns`, bubblewrap 0.8): a daemon not running as root
    /// otherwise lets one mount a file system in memory as large as the
    /// host's (`unshare -Urm`, then `mount -t tmpfs`).
    pub disables_userns: bool,
}

impl Features {
    pub(super) fn of(bin: &str) -> Self {
        let help = Command::new(bin)
            .arg("--help")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        Self {
            disables_userns: help.contains("--disable-userns"),
        }
    }
}
