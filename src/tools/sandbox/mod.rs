//! The OS sandbox around every command the agent runs on the local backend
//! (`terminal`, `process`, and whatever they spawn). Approvals judge intent;
//! this is the boundary: a command reads the system, reads and writes its own
//! session's workspace and a private temporary directory, and nothing else —
//! not the daemon's data, database, configuration or `/proc` entries, nor
//! other sessions' workspaces — and it cannot signal or trace the daemon.
//!
//! Two mechanisms, chosen by `[tools.sandbox] mode`:
//! - **Landlock** (ABI 6 or newer): a ruleset built in the daemon, applied in
//!   the child between fork and exec ([`confine`]). Landlock also forbids
//!   ptrace-class access (`/proc/<pid>/environ`, `mem`, `root`) and signals
//!   to processes outside the child's domain. The child is the command's
//!   reaper ([`reaper`]): every process of the command ends with it.
//! - **bubblewrap**: new namespaces (user, pid, ipc, uts, cgroup, and net
//!   unless `network = true`) with a read-only view of the system.
//!
//! `auto` takes the first that works here, proved by running `true` through
//! it. When none does, the local backend is unavailable with the reason;
//! `off` runs unsandboxed only when the operator says so.

mod bwrap;
mod disk;
mod landlock;
mod reaper;
mod seccomp;

pub use disk::Reserve;
pub use reaper::{Ending, Unfinished};

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::config::{SandboxConfig, SandboxMode};

/// System directories every command may read and execute from.
const SYSTEM_ROOTS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc",
];

/// Devices a command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Why a command cannot be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No mechanism works here (`check` and `tools` say why).
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The kernel refused the Landlock ruleset.
    #[error("landlock: {0}")]
    Landlock(#[from] ::landlock::RulesetError),
    /// The kernel refused a rule beneath `path`.
    #[error("landlock: {}: {source}", path.display())]
    Rule {
        /// Where the rule was to apply.
        path: PathBuf,
        /// What the kernel said.
        source: ::landlock::RulesetError,
    },
    /// The kernel gave no ruleset descriptor.
    #[error("landlock: no ruleset was created")]
    NoRuleset,
}

/// The sandbox commands run in, chosen once.
#[derive(Debug, Clone)]
pub struct Sandbox {
    choice: Choice,
    policy: Arc<Policy>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    Landlock,
    /// bubblewrap at `bin`, and what this version of it can do.
    Bwrap {
        bin: String,
        can: bwrap::Features,
    },
    Off,
    Unavailable(String),
}

/// What a sandboxed command may reach, beyond its own directories.
#[derive(Debug)]
struct Policy {
    mode: SandboxMode,
    /// Readable roots as configured (bubblewrap mounts these names).
    read_roots: Vec<PathBuf>,
    /// The same, canonical, with every hidden path cut out (Landlock's
    /// rules cannot subtract, so a root holding a hidden path becomes its
    /// entries).
    readable: Vec<PathBuf>,
    /// The readable roots opened once (`O_PATH`), with whether each is a
    /// directory, for Landlock's rules; shared by every sandbox of the
    /// process with the same roots.
    opened: Arc<Vec<(std::os::fd::OwnedFd, bool)>>,
    read_write: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    network: bool,
    limits: Limits,
    /// What every filesystem a command writes keeps free.
    disk_reserve: disk::Free,
}

/// Resource limits of a sandboxed command, applied before exec.
#[derive(Debug, Clone, Copy)]
struct Limits {
    cpu_secs: u64,
    data_bytes: u64,
    processes: u64,
    file_bytes: u64,
    open_files: u64,
}

/// The directories of one command: its session's workspace, its private
/// temporary directory and where it starts.
#[derive(Debug, Clone, Copy)]
pub struct Dirs<'a> {
    /// The session's workspace (read-write; the command's `HOME`).
    pub workspace: &'a Path,
    /// The session's private temporary directory (read-write; `TMPDIR`).
    pub tmp: &'a Path,
    /// Where the command starts, inside the workspace.
    pub workdir: &'a Path,
}

impl Sandbox {
    /// The sandbox `config` asks for, probed on this host. `protected` are
    /// the gateway's own paths (its data directory, database, workspace
    /// root, configuration): hidden even where they lie under a readable
    /// root.
    pub fn new(config: &SandboxConfig, protected: &[PathBuf]) -> Self {
        let policy = Arc::new(Policy::new(config, protected));
        let choice = match config.mode {
            SandboxMode::Off => Choice::Off,
            SandboxMode::Landlock => probe(Choice::Landlock, &policy),
            SandboxMode::Bwrap => probe(Choice::bwrap(&config.bwrap_bin), &policy),
            SandboxMode::Auto => match probe(Choice::Landlock, &policy) {
                Choice::Unavailable(landlock) => {
                    match probe(Choice::bwrap(&config.bwrap_bin), &policy) {
                        Choice::Unavailable(bwrap) => Choice::Unavailable(format!(
                            "no sandbox can be applied here (landlock: {landlock}; bwrap: {bwrap}); set [tools.sandbox] mode = \"off\" to run commands unsandboxed knowingly"
                        )),
                        chosen => chosen,
                    }
                }
                chosen => chosen,
            },
        };
        Self { choice, policy }
    }

    /// Whether commands can run, with the reason when not.
    pub fn check(&self) -> Result<(), crate::tools::Unavailable> {
        match &self.choice {
            Choice::Unavailable(reason) => {
                Err(SandboxError::Unavailable(reason.clone()).to_string().into())
            }
            _ => Ok(()),
        }
    }

    /// Whether a command's process is its reaper ([`reaper`]), to be ended
    /// through it.
    pub fn reaps(&self) -> bool {
        self.choice == Choice::Landlock
    }

    /// Whether commands run unsandboxed (the operator's explicit `off`).
    pub fn is_off(&self) -> bool {
        self.choice == Choice::Off
    }

    /// The mechanism in use (`landlock`, `bwrap`, `off`) or `unavailable`.
    pub fn mechanism(&self) -> &'static str {
        match self.choice {
            Choice::Landlock => "landlock",
            Choice::Bwrap { .. } => "bwrap",
            Choice::Off => "off",
            Choice::Unavailable(_) => "unavailable",
        }
    }

    /// One line for `switchboard check`: what was chosen and why.
    pub fn describe(&self) -> String {
        let asked = match self.policy.mode {
            SandboxMode::Auto => "auto",
            SandboxMode::Landlock => "landlock",
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Off => "off",
        };
        let network = if self.policy.network {
            "network on"
        } else {
            "network off"
        };
        match &self.choice {
            Choice::Landlock => format!(
                "landlock (mode {asked}; kernel Landlock ABI {}; {network})",
                landlock::kernel_abi()
            ),
            Choice::Bwrap { bin, can } => {
                let why = if self.policy.mode == SandboxMode::Auto {
                    format!(
                        "Landlock ABI {} unavailable (needs {}), ",
                        landlock::kernel_abi(),
                        landlock::ABI_NEEDED
                    )
                } else {
                    String::new()
                };
                let userns = if can.disables_userns {
                    ""
                } else {
                    "; it cannot keep commands from making user namespaces (needs bubblewrap 0.8)"
                };
                format!("bwrap (mode {asked}; {why}{bin} works; {network}{userns})")
            }
            Choice::Off => {
                "off: commands run unsandboxed, as the daemon's user ([tools.sandbox] mode = \"off\")"
                    .into()
            }
            Choice::Unavailable(reason) => format!("unavailable (mode {asked}): {reason}"),
        }
    }

    /// `path` (a `PATH` value) without the directories a sandboxed command
    /// cannot read, so a lookup does not stop at one it may not execute.
    pub fn visible_path(&self, path: &str) -> String {
        if self.is_off() {
            return path.to_string();
        }
        std::env::split_paths(path)
            .filter(|dir| {
                dir.canonicalize()
                    .is_ok_and(|dir| self.policy.readable.iter().any(|r| dir.starts_with(r)))
            })
            .map(|dir| dir.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The free space a command confined to `dirs` leaves on what it can
    /// write: its workspace, its temporary directory, `read_write`.
    pub fn reserve(&self, dirs: Dirs<'_>) -> Reserve {
        let paths = [dirs.workspace, dirs.tmp]
            .into_iter()
            .map(Path::to_path_buf)
            .chain(self.policy.read_write.iter().cloned())
            .collect();
        Reserve::new(self.policy.disk_reserve, paths)
    }

    /// What keeps commands from being bounded as configured here, for
    /// `check` and the daemon's start: the disk under `workspaces` or
    /// `read_write` already below the reserve (every writing command
    /// would be ended), a daemon running as root (the kernel applies no
    /// `processes` limit to root's processes).
    pub fn warnings(&self, workspaces: &Path) -> Vec<String> {
        let mut warnings: Vec<String> = std::iter::once(workspaces)
            .chain(self.policy.read_write.iter().map(PathBuf::as_path))
            .filter_map(|dir| disk::short_of(self.policy.disk_reserve, dir))
            .collect();
        if !self.is_off() && nix::unistd::geteuid().is_root() {
            warnings.push(
                "the daemon runs as root: the kernel applies no processes limit (RLIMIT_NPROC, [tools.sandbox] processes) to root's processes, so a command can start processes until the host has no pid left; run the daemon as a user of its own (the unit's DynamicUser, the image's uid 10001)"
                    .into(),
            );
        }
        warnings
    }

    /// A command running `program args` confined to `dirs`, with exactly
    /// `env` plus `HOME` (the workspace) and `TMPDIR`; unless `may_write`,
    /// with a file size limit of zero (it may remove files, not write
    /// them: the disk is nearly full).
    pub fn command(
        &self,
        program: &str,
        args: &[&str],
        dirs: Dirs<'_>,
        env: &[(String, String)],
        may_write: bool,
    ) -> Result<Command, SandboxError> {
        let policy = &self.policy;
        let (mut cmd, rulesets, tmp) = match &self.choice {
            Choice::Unavailable(reason) => return Err(SandboxError::Unavailable(reason.clone())),
            Choice::Off => {
                let mut cmd = Command::new(program);
                cmd.args(args).current_dir(dirs.workdir);
                (cmd, None, dirs.tmp.as_os_str().to_owned())
            }
            Choice::Landlock => {
                let rulesets = (landlock::ruleset(policy, dirs)?, landlock::nested()?);
                let mut cmd = Command::new(program);
                cmd.args(args).current_dir(dirs.workdir);
                (cmd, Some(rulesets), dirs.tmp.as_os_str().to_owned())
            }
            Choice::Bwrap { bin, can } => (
                bwrap::command(bin, *can, policy, dirs, program, args),
                None,
                OsString::from("/tmp"),
            ),
        };
        cmd.env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("HOME", dirs.workspace)
            .env("TMPDIR", tmp);
        if !self.is_off() {
            let mut limits = policy.limits;
            if !may_write {
                limits.file_bytes = 0;
            }
            confine(&mut cmd, limits, rulesets);
        }
        Ok(cmd)
    }
}

impl Policy {
    fn new(config: &SandboxConfig, protected: &[PathBuf]) -> Self {
        let mut read_roots: Vec<PathBuf> = SYSTEM_ROOTS.iter().map(PathBuf::from).collect();
        // A resolver configuration kept outside /etc (systemd-resolved's
        // stub) must stay readable, or names stop resolving.
        if let Ok(resolv) = Path::new("/etc/resolv.conf").canonicalize()
            && !resolv.starts_with("/etc")
        {
            read_roots.push(resolv);
        }
        read_roots.extend(config.read_only.iter().cloned());
        let hidden: Vec<PathBuf> = config
            .hidden
            .iter()
            .chain(protected)
            .map(|p| absolute(p))
            .collect();
        let mut readable = Vec::new();
        for root in &read_roots {
            if let Ok(root) = root.canonicalize() {
                cut(&root, &hidden, &mut readable);
            }
        }
        readable.sort();
        readable.dedup();
        let opened = if config.mode == SandboxMode::Off {
            Arc::default()
        } else {
            landlock::open_readable(&readable)
        };
        Self {
            mode: config.mode,
            read_roots,
            readable,
            opened,
            read_write: config.read_write.iter().map(|p| absolute(p)).collect(),
            hidden,
            network: config.network,
            limits: Limits {
                cpu_secs: config.cpu_secs,
                data_bytes: config.memory_mb.saturating_mul(1 << 20),
                processes: config.processes,
                file_bytes: config.file_size_mb.saturating_mul(1 << 20),
                open_files: config.open_files,
            },
            disk_reserve: disk::Free {
                bytes: config.disk_reserve_mb.saturating_mul(1 << 20),
                inodes: config.disk_reserve_inodes,
            },
        }
    }
}

/// `path` made absolute and canonical where it exists.
fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    })
}

/// Adds `dir` to `out` minus every hidden path: a directory holding a hidden
/// path is replaced by its entries, recursively.
fn cut(dir: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>) {
    if hidden.iter().any(|h| dir.starts_with(h)) {
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        // A rule follows symbolic links: judge the entry by its target.
        if let Ok(target) = entry.path().canonicalize() {
            cut(&target, hidden, out);
        }
    }
}

/// The private temporary directory of the session whose workspace is
/// `workspace`: beside the workspaces, mode 0700, created if missing.
pub fn private_tmp(workspace: &Path) -> std::io::Result<PathBuf> {
    let name = workspace.file_name().unwrap_or_default();
    let dir = workspace
        .parent()
        .unwrap_or(workspace)
        .join(".tmp")
        .join(name);
    crate::private::private_dir(&dir)?;
    Ok(dir)
}

/// Runs `true` through `choice` with `policy`, in a throwaway directory.
impl Choice {
    fn bwrap(bin: &str) -> Self {
        Self::Bwrap {
            bin: bin.to_string(),
            can: bwrap::Features::of(bin),
        }
    }
}

fn probe(choice: Choice, policy: &Arc<Policy>) -> Choice {
    if let Choice::Landlock = choice
        && landlock::kernel_abi() < landlock::ABI_NEEDED as i64
    {
        return Choice::Unavailable(format!(
            "the kernel offers Landlock ABI {}; switchboard needs {} (Linux 6.12 or newer) for signal scoping",
            landlock::kernel_abi().max(0),
            landlock::ABI_NEEDED
        ));
    }
    let sandbox = Sandbox {
        choice: choice.clone(),
        policy: policy.clone(),
    };
    let dir = std::env::temp_dir().join(format!(
        "switchboard-probe-{}-{}",
        std::process::id(),
        crate::store::new_id()
    ));
    let outcome = (|| {
        let workspace = dir.join("ws");
        std::fs::create_dir_all(&workspace).map_err(|e| e.to_string())?;
        let tmp = private_tmp(&workspace).map_err(|e| e.to_string())?;
        let dirs = Dirs {
            workspace: &workspace,
            tmp: &tmp,
            workdir: &workspace,
        };
        let output = sandbox
            .command("true", &[], dirs, &[("PATH".into(), default_path())], true)
            .map_err(|e| e.to_string())?
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot start it: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            let said = String::from_utf8_lossy(&output.stderr);
            Err(format!(
                "a test command failed ({}): {}",
                output.status,
                said.trim()
            ))
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match outcome {
        Ok(()) => choice,
        Err(reason) => Choice::Unavailable(reason),
    }
}

/// The daemon's `PATH`, or the usual one.
pub fn default_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

/// Sets `limits` (never above the daemon's own hard limits), marks every
/// inherited descriptor close-on-exec, applies Landlock with the command's
/// ruleset and splits the child into its reaper and the command, whose
/// domain is nested in the reaper's ([`reaper`]; `rulesets`: the command's
/// and the nested one), and applies the seccomp program ([`seccomp`]), in
/// the child before it executes the command.
#[allow(unsafe_code)]
fn confine(cmd: &mut Command, limits: Limits, rulesets: Option<(OwnedFd, OwnedFd)>) {
    let no_file_writes = limits.file_bytes == 0;
    let cap = |resource: Resource, value: u64| {
        let hard = getrlimit(resource).map(|(_, hard)| hard).unwrap_or(value);
        (resource, value.min(hard))
    };
    let limits = [
        cap(Resource::RLIMIT_CPU, limits.cpu_secs),
        cap(Resource::RLIMIT_DATA, limits.data_bytes),
        cap(Resource::RLIMIT_NPROC, limits.processes),
        cap(Resource::RLIMIT_FSIZE, limits.file_bytes),
        cap(Resource::RLIMIT_NOFILE, limits.open_files),
    ];
    let fds = rulesets
        .as_ref()
        .map(|(own, nested)| (own.as_raw_fd(), nested.as_raw_fd()));
    let mut filter = seccomp::program(rulesets.is_some(), no_file_writes);
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are sound. It makes raw system calls
    // (close_range, setrlimit, prctl, landlock_restrict_self, the reaper's,
    // the seccomp filter whose program the closure owns) on values computed
    // above, allocates nothing and takes no lock; its errors are plain errno
    // values. It owns the rulesets' descriptors, so they stay open until the
    // command is dropped (they are close-on-exec in the child).
    unsafe {
        cmd.pre_exec(move || {
            let _rulesets = &rulesets;
            // Descriptors the daemon itself inherited reach no command.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if let Some((own, nested)) = fds {
                drop_capabilities()?;
                nix::sys::prctl::set_no_new_privs()
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                if libc::syscall(libc::SYS_landlock_restrict_self, own, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                reaper::split(nested)?;
            } else {
                nix::sys::prctl::set_no_new_privs()
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            }
            // The command's limits, not its reaper's: a reaper out of CPU
            // time would die, and leave what the command started running.
            for (resource, value) in limits {
                setrlimit(resource, value, value)
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            }
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_mut_ptr(),
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &program as *const libc::sock_fprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Empties the bounding set (where this process may) and the capability
/// sets, so a command of a daemon running as root holds no capability after
/// exec: Landlock lets `CAP_SYS_PTRACE` read other processes' `/proc`
/// entries. Raw system calls only: it runs between fork and exec.
#[allow(unsafe_code)]
fn drop_capabilities() -> std::io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capset with plain integers and two arrays on this
    // stack frame, laid out as capset(2) documents (a header of version and
    // pid, then two data records of effective, permitted, inheritable).
    unsafe {
        for cap in 0..64 {
            // EINVAL past the last capability, EPERM without CAP_SETPCAP
            // (an unprivileged daemon, whose children gain none anyway).
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        let header: [u32; 2] = [LINUX_CAPABILITY_VERSION_3, 0];
        let data: [u32; 6] = [0; 6];
        if libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_holding_a_hidden_path_becomes_its_other_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("etc/switchboard")).unwrap();
        std::fs::create_dir_all(root.join("etc/ssl")).unwrap();
        std::fs::write(root.join("etc/hosts"), "").unwrap();
        std::os::unix::fs::symlink(root.join("etc/switchboard"), root.join("etc/sneaky")).unwrap();
        let mut out = Vec::new();
        cut(&root, &[root.join("etc/switchboard")], &mut out);
        out.sort();
        assert_eq!(out, vec![root.join("etc/hosts"), root.join("etc/ssl")]);
    }

    #[test]
    fn a_hidden_root_is_dropped_and_an_unrelated_one_kept() {
        let mut out = Vec::new();
        cut(Path::new("/usr"), &[PathBuf::from("/etc")], &mut out);
        cut(Path::new("/etc/x"), &[PathBuf::from("/etc")], &mut out);
        assert_eq!(out, vec![PathBuf::from("/usr")]);
    }
}
