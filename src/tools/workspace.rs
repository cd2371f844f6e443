//! Confinement of file tools to the session's workspace: a path is accepted
//! only if, with symlinks resolved, it stays inside the workspace root; and
//! what the daemon then reads or writes there is opened beneath the
//! workspace by the kernel (`openat2` with `RESOLVE_BENEATH`), so a
//! directory swapped for a symlink in between cannot lead it out.

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;

use super::ToolError;

/// The workspace directory of a session under `root`, created if missing
/// (it and a missing root `0700`), canonical.
pub fn session_dir(root: &Path, session_key: &str) -> std::io::Result<PathBuf> {
    let dir = session_path(root, session_key);
    crate::private::private_dir(&dir)?;
    dir.canonicalize()
}

/// Where the workspace of a session under `root` is, made or not: the key
/// made filesystem-safe, a hash suffix keeping distinct keys apart.
pub fn session_path(root: &Path, session_key: &str) -> PathBuf {
    let safe: String = session_key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    root.join(format!(
        "{safe}-{:08x}",
        fnv1a(session_key.as_bytes()) as u32
    ))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Resolves `input` (relative to the workspace, or absolute inside it) to
/// a canonical path inside `root` (which must be canonical). The path need
/// not exist; its deepest existing ancestor must be inside, and the rest
/// may not climb with `..`.
pub fn resolve(root: &Path, input: &str) -> Result<PathBuf, ToolError> {
    if input.contains('\0') {
        return Err(ToolError::Refused("path contains a NUL byte".into()));
    }
    if input.trim().is_empty() {
        return Err(ToolError::InvalidArgs("path is empty".into()));
    }
    let joined = root.join(input);
    let outside = || {
        ToolError::Refused(format!(
            "path {input:?} is outside the session workspace; use paths inside it"
        ))
    };
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    let base = loop {
        match existing.canonicalize() {
            Ok(canonical) => break canonical,
            Err(_) => {
                let name = existing.file_name().ok_or_else(outside)?;
                rest.push(name.to_owned());
                existing = existing.parent().ok_or_else(outside)?;
            }
        }
    };
    if !base.starts_with(root) {
        return Err(outside());
    }
    // Components under a missing ancestor cannot be symlinks, but may be
    // `..` (`missing/../../etc`).
    let tail: PathBuf = rest.iter().rev().collect();
    if tail
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(outside());
    }
    if tail.as_os_str().is_empty() {
        Ok(base)
    } else {
        Ok(base.join(tail))
    }
}

/// `path` (inside `root`, as [`resolve`] gave it) relative to `root`.
fn beneath(root: &Path, path: &Path) -> std::io::Result<PathBuf> {
    path.strip_prefix(root)
        .map(Path::to_path_buf)
        .map_err(|_| std::io::Error::other("the path is outside the session workspace"))
}

/// How every step below the workspace is resolved: never above the
/// directory it starts from, and never through `/proc`'s magic links.
fn inside() -> OpenHow {
    OpenHow::new().resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS)
}

fn open_dir(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// Directory `rel` of the workspace `root`, made (0700) where missing and
/// opened one step at a time, each beneath the one before.
fn dir_beneath(root: &Path, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut dir = open_dir(root)?;
    for part in rel.components() {
        match nix::sys::stat::mkdirat(&dir, part.as_os_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(err) => return Err(err.into()),
        }
        dir = openat2(
            &dir,
            part.as_os_str(),
            inside().flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC),
        )?;
    }
    Ok(dir)
}

/// Opens `path` (inside `root`, as [`resolve`] gave it) for reading, every
/// component resolved beneath the workspace by the kernel: a directory the
/// agent swaps for a symlink after [`resolve`] checked the path cannot lead
/// the daemon out. Data only: the path is looked at before it
/// is opened (an `O_PATH` handle), so a device node or socket the agent
/// put there (a container's root can make one on the bind-mounted
/// workspace) is never opened, and a directory is an `IsADirectory`
/// error. `fifo`: a FIFO may be read (a tool the agent calls may wait on
/// one; the daemon reading of its own accord may not); it is opened
/// without waiting for a writer (`O_NONBLOCK`), for [`read_fifo`]. Opened
/// without becoming the daemon's controlling terminal.
pub fn open_data_beneath(root: &Path, path: &Path, fifo: bool) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let handle = open_beneath_with(root, path, OFlag::O_PATH)?;
    let kind = handle.metadata()?.file_type();
    if kind.is_dir() {
        return Err(std::io::ErrorKind::IsADirectory.into());
    }
    if !(kind.is_file() || (fifo && kind.is_fifo())) {
        return Err(std::io::Error::other("not a regular file"));
    }
    let nonblocking = if kind.is_fifo() { libc::O_NONBLOCK } else { 0 };
    // The very file looked at, opened for reading through its handle.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | nonblocking)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
}

/// How long a tool waits for a FIFO's writer to finish.
pub const FIFO_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a FIFO [`open_data_beneath`] opened, until its writer closes it
/// or `limit` bytes came, for at most `wait`: a FIFO nobody writes to holds
/// a thread of the blocking pool no longer than that (thousands of reads
/// waiting for good would hold them all, for every session).
pub fn read_fifo(
    file: &std::fs::File,
    limit: u64,
    wait: std::time::Duration,
) -> std::io::Result<Vec<u8>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::io::{ErrorKind, Read};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while (out.len() as u64) <= limit {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                format!("the FIFO's writer did not finish within {wait:?}"),
            ));
        }
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        // Readable, or its writer came and went (until one comes, Linux
        // reports neither).
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(err) => return Err(err.into()),
        }
        match (&*file).read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(out)
}

fn open_beneath_with(root: &Path, path: &Path, extra: OFlag) -> std::io::Result<std::fs::File> {
    let dir = open_dir(root)?;
    let rel = beneath(root, path)?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel.as_path()
    };
    let fd = openat2(
        &dir,
        rel,
        inside().flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | extra),
    )?;
    Ok(std::fs::File::from(fd))
}

/// Writes `content` as `path` (inside `root`) atomically — a temporary file
/// beside it, then a rename — creating missing directories, every step
/// made relative to a directory opened beneath the workspace, so no swap of
/// a directory for a symlink can send the write elsewhere.
pub fn write_beneath(root: &Path, path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let rel = beneath(root, path)?;
    let name = rel
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?
        .to_owned();
    let dir = dir_beneath(root, rel.parent().unwrap_or(Path::new("")))?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(&name);
    tmp.push(format!(".tmp-{}", crate::store::new_id()));
    let fd = nix::fcntl::openat(
        &dir,
        tmp.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let written = std::fs::File::from(fd).write_all(content).and_then(|()| {
        nix::fcntl::renameat(&dir, tmp.as_os_str(), &dir, name.as_os_str())
            .map_err(std::io::Error::from)
    });
    if written.is_err() {
        let _ = nix::unistd::unlinkat(
            &dir,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    written
}

/// Where the daemon receives files for the session whose workspace is
/// `workspace` before they are moved in ([`move_beneath`]): beside the
/// workspaces, where no command of any session can reach, mode 0700.
pub fn staging_dir(workspace: &Path) -> std::io::Result<PathBuf> {
    let name = workspace.file_name().unwrap_or_default();
    let dir = workspace
        .parent()
        .unwrap_or(workspace)
        .join(".incoming")
        .join(name);
    crate::private::private_dir(&dir)?;
    Ok(dir)
}

/// Moves `file` (in the daemon's staging directory) into directory `into`
/// of the workspace `root`, made if missing, every step beneath the
/// workspace (see [`write_beneath`]); returns where it now is.
pub fn move_beneath(root: &Path, file: &Path, into: &str) -> std::io::Result<PathBuf> {
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other("the file has no name"))?;
    let dir = dir_beneath(root, Path::new(into))?;
    nix::fcntl::renameat(nix::fcntl::AT_FDCWD, file, &dir, name)?;
    Ok(root.join(into).join(name))
}

/// The path relative to the workspace root, for messages to the model.
pub fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        let root = root.canonicalize().unwrap();
        (dir, root)
    }

    /// A FIFO nobody writes to is opened at once and read for at most the
    /// wait; one whose writer finishes is read whole.
    #[test]
    fn a_fifo_is_read_for_a_bounded_time() {
        let (_dir, root) = ws();
        let pipe = root.join("p");
        nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let silent = open_data_beneath(&root, &pipe, true).unwrap();
        let err = read_fifo(&silent, 1024, std::time::Duration::from_millis(100)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        let fed = open_data_beneath(&root, &pipe, true).unwrap();
        let writer = {
            let pipe = pipe.clone();
            std::thread::spawn(move || std::fs::write(pipe, "fed\n").unwrap())
        };
        let read = read_fifo(&fed, 1024, std::time::Duration::from_secs(30)).unwrap();
        writer.join().unwrap();
        assert_eq!(read, b"fed\n");
        assert!(
            open_data_beneath(&root, &pipe, false).is_err(),
            "not for the daemon's own reads"
        );
    }

    #[test]
    fn inside_paths_resolve() {
        let (_d, root) = ws();
        assert_eq!(resolve(&root, "sub/a.txt").unwrap(), root.join("sub/a.txt"));
        assert_eq!(
            resolve(&root, "sub/../sub/a.txt").unwrap(),
            root.join("sub/a.txt")
        );
        assert_eq!(
            resolve(&root, "new/dir/file.txt").unwrap(),
            root.join("new/dir/file.txt")
        );
        let absolute = root.join("sub/a.txt");
        assert_eq!(
            resolve(&root, absolute.to_str().unwrap()).unwrap(),
            absolute
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, root) = ws();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("sub/s.txt")).unwrap();
        for bad in [
            "../secret.txt",
            "sub/../../secret.txt",
            "/etc/passwd",
            "link/secret.txt",
            "sub/s.txt",
            "missing/../../secret.txt",
            "a\0b",
            "",
        ] {
            assert!(resolve(&root, bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_check_leads_nowhere() {
        let (dir, root) = ws();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("gateway.toml"), "secret").unwrap();
        // What `resolve` checked was a real directory; by the time the
        // daemon opens the path, the agent made it a symlink out.
        let checked = resolve(&root, "d/gateway.toml").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        assert!(
            open_data_beneath(&root, &checked, false).is_err(),
            "read outside"
        );
        assert!(
            write_beneath(&root, &checked, b"pwned").is_err(),
            "wrote outside"
        );
        let deeper = root.join("d/new/file.txt");
        assert!(write_beneath(&root, &deeper, b"pwned").is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("gateway.toml")).unwrap(),
            "secret"
        );
        assert!(
            !outside.join("new").exists(),
            "a directory was made outside"
        );
        // Inside, both work, missing directories included.
        let inside = resolve(&root, "made/here/a.txt").unwrap();
        write_beneath(&root, &inside, b"fine").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut open_data_beneath(&root, &inside, false).unwrap(),
            &mut text,
        )
        .unwrap();
        assert_eq!(text, "fine");
    }

    /// A device node or socket in the workspace (a container's root can
    /// make one) is never opened; a FIFO only when the caller allows it.
    #[test]
    fn only_data_is_opened() {
        let (_d, root) = ws();
        let null = root.join("null");
        nix::sys::stat::mknod(
            &null,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::S_IRWXU,
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        let err = open_data_beneath(&root, &null, true).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let socket = root.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(open_data_beneath(&root, &socket, true).is_err());
        let fifo = root.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(open_data_beneath(&root, &fifo, false).is_err());
        let dir = open_data_beneath(&root, &root.join("sub"), true).unwrap_err();
        assert_eq!(dir.kind(), std::io::ErrorKind::IsADirectory);
    }

    #[test]
    fn a_received_file_moves_in_only_beneath_the_workspace() {
        let (dir, root) = ws();
        let staging = staging_dir(&root).unwrap();
        assert!(
            !staging.starts_with(&root),
            "staging is out of the agent's reach"
        );
        let file = staging.join("photo.jpg");
        std::fs::write(&file, "jpeg").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("attachments")).unwrap();
        assert!(move_beneath(&root, &file, "attachments").is_err());
        assert!(!outside.join("photo.jpg").exists(), "moved outside");
        std::fs::remove_file(root.join("attachments")).unwrap();
        let moved = move_beneath(&root, &file, "attachments").unwrap();
        assert_eq!(moved, root.join("attachments/photo.jpg"));
        assert_eq!(std::fs::read_to_string(moved).unwrap(), "jpeg");
    }

    #[test]
    fn session_dirs_are_distinct_and_safe() {
        let dir = tempfile::tempdir().unwrap();
        let a = session_dir(dir.path(), "chat:dm:42").unwrap();
        let b = session_dir(dir.path(), "chat_dm_42").unwrap();
        assert_ne!(a, b);
        let evil = session_dir(dir.path(), "../../etc").unwrap();
        assert!(evil.starts_with(dir.path().canonicalize().unwrap()));
    }
}
