//! A pid namespace of its own for each command under Landlock, so nothing it
//! starts outlives it.
//!
//! Between fork and exec the child enters a new user and pid namespace
//! ([`enter`]); it then executes util-linux's `unshare --fork --kill-child`,
//! whose child is the namespace's first process and runs the command. When
//! that process ends (the command is done, or killed with its process
//! group), the kernel kills every process left in the namespace, detached
//! ones (`setsid`, `nohup … &`) included; when `unshare` is killed, its
//! child gets SIGKILL. The waiting parent is a small program of its own,
//! not a fork of the daemon that would keep a copy of its memory.
//!
//! The user namespace maps the daemon's own uid and gid, unchanged, and
//! gives each command its own count of processes: `processes`
//! (RLIMIT_NPROC) is then the command's, not shared by every session.

use std::ffi::CStr;
use std::io;
use std::path::PathBuf;

/// The identity maps written into a command's new user namespace, made
/// before fork (nothing is allocated between fork and exec).
#[derive(Debug, Clone)]
pub(super) struct Ids {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl Ids {
    /// The daemon's uid and gid, each mapped to itself.
    #[allow(unsafe_code)]
    pub(super) fn current() -> Self {
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

/// util-linux's `unshare` on the daemon's `PATH`, canonical, if there is
/// one.
pub(super) fn unshare_bin() -> Option<PathBuf> {
    std::env::split_paths(&super::default_path())
        .map(|dir| dir.join("unshare"))
        .find(|path| path.is_file())
        .and_then(|path| path.canonicalize().ok())
}

/// Moves the calling process into a new user namespace (with `ids`) and a
/// new pid namespace, which its next child starts. Raw system calls only:
/// it runs between fork and exec.
#[allow(unsafe_code)]
pub(super) fn enter(ids: &Ids) -> io::Result<()> {
    // SAFETY: unshare and prctl with constant arguments, then writes of
    // byte slices made before fork to files of this process; nothing is
    // allocated.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The daemon is not dumpable, so this copy of it owns none of its
        // /proc files and could not write its maps unless root. It is
        // dumpable while it writes them (to processes of its user outside
        // any sandbox: Landlock keeps commands from tracing it), and exec
        // gives the command a memory of its own.
        libc::prctl(libc::PR_SET_DUMPABLE, 1);
        let written = write_file(c"/proc/self/setgroups", b"deny")
            .and_then(|()| write_file(c"/proc/self/uid_map", &ids.uid_map))
            .and_then(|()| write_file(c"/proc/self/gid_map", &ids.gid_map));
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        written
    }
}

/// Writes `data` to `path` in one call.
#[allow(unsafe_code)]
fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open, write and close on a NUL-terminated path and a slice
    // that outlive the calls; async-signal-safe.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}
