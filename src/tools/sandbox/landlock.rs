//! The Landlock ruleset of one command: built in the daemon (opening each
//! allowed path), enforced in the child by [`super::confine`].
//!
//! Every filesystem right of ABI 6 is handled, so whatever no rule grants
//! is refused; signals and abstract UNIX sockets are scoped to the
//! command's own domain; with `network = false` TCP bind and connect are
//! handled with no rule, so refused.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::{DEVICES, Dirs, Policy, SandboxError};

/// Opens each readable root once for every ruleset after: a root with a
/// hidden path inside is many entries, and a command should not pay for
/// opening them each time. Shared by the process's sandboxes with the same
/// roots (a test process builds many), so descriptors do not pile up.
/// `/proc` is among them: a command's own entries (and `ps`); entries of
/// processes outside its domain refuse ptrace-class access (environ, mem,
/// fd, root).
pub(super) fn open_readable(readable: &[PathBuf]) -> Arc<Vec<(OwnedFd, bool)>> {
    type Opened = Vec<(Vec<PathBuf>, Arc<Vec<(OwnedFd, bool)>>)>;
    static OPENED: Mutex<Opened> = Mutex::new(Vec::new());
    let mut cache = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, opened)) = cache.iter().find(|(roots, _)| roots == readable) {
        return opened.clone();
    }
    let opened: Arc<Vec<(OwnedFd, bool)>> = Arc::new(
        readable
            .iter()
            .map(|p| p.as_path())
            .chain([Path::new("/proc")])
            .filter_map(|path| {
                let fd = nix::fcntl::open(
                    path,
                    nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .ok()?;
                Some((fd, path.is_dir()))
            })
            .collect(),
    );
    cache.push((readable.to_vec(), opened.clone()));
    opened
}

/// The oldest ABI whose guarantees the sandbox promises: signal scoping
/// arrived in ABI 6 (Linux 6.12).
pub(super) const ABI_NEEDED: ABI = ABI::V6;

/// The Landlock ABI the running kernel offers (0 or less: none).
#[allow(unsafe_code)]
pub(super) fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: asking for the version passes no memory to the kernel (a
    // null attribute of size 0), as landlock_create_ruleset(2) documents.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    }
}

/// The ruleset for a command in `dirs` under `policy`.
pub(super) fn ruleset(policy: &Policy, dirs: Dirs<'_>) -> Result<OwnedFd, SandboxError> {
    let abi = ABI_NEEDED;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::from_all(abi))?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    for (fd, dir) in policy.opened.iter() {
        let access = if *dir {
            AccessFs::from_read(abi)
        } else {
            AccessFs::from_read(abi) & AccessFs::from_file(abi)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    for device in DEVICES {
        created = allow(
            created,
            Path::new(device),
            AccessFs::ReadFile | AccessFs::WriteFile,
        )?;
    }
    for dir in [dirs.workspace, dirs.tmp]
        .into_iter()
        .chain(policy.read_write.iter().map(|p| p.as_path()))
    {
        created = allow(created, dir, AccessFs::from_all(abi))?;
    }
    Option::<OwnedFd>::from(created).ok_or(SandboxError::NoRuleset)
}

/// The ruleset of the domain a command runs in inside its reaper's
/// ([`super::reaper`]): it only scopes signals and abstract sockets, so
/// that the command cannot signal its reaper.
pub(super) fn nested() -> Result<OwnedFd, SandboxError> {
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::from_all(ABI_NEEDED))?
        .create()?;
    Option::<OwnedFd>::from(created).ok_or(SandboxError::NoRuleset)
}

/// `created` with `access` granted beneath `path`; a path that does not
/// exist grants nothing.
fn allow(
    created: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, SandboxError> {
    let Ok(fd) = PathFd::new(path) else {
        return Ok(created);
    };
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI_NEEDED)
    };
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|source| SandboxError::Rule {
            path: path.to_path_buf(),
            source,
        })
}
