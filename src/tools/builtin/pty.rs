//! A pseudo-terminal for a command that wants a TTY: the child gets the
//! terminal's side as its stdin, stdout and stderr; the daemon reads the
//! other side without blocking a thread, until the last process holding
//! the terminal lets go of it.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};

/// Rows and columns the terminal reports.
const SIZE: nix::pty::Winsize = nix::pty::Winsize {
    ws_row: 40,
    ws_col: 120,
    ws_xpixel: 0,
    ws_ypixel: 0,
};

/// The daemon's side of a pseudo-terminal: what the child writes to it.
#[derive(Debug)]
pub struct Master(AsyncFd<std::fs::File>);

/// A new pseudo-terminal: the daemon's side, and the child's.
pub fn open() -> std::io::Result<(Master, OwnedFd)> {
    let pair = nix::pty::openpty(Some(&SIZE), None)?;
    // openpty makes both ends inheritable: no other child the daemon
    // starts may hold this terminal (the command gets its end as its
    // stdin, stdout and stderr, which exec keeps).
    for end in [&pair.master, &pair.slave] {
        fcntl(end, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    }
    let flags = OFlag::from_bits_truncate(fcntl(&pair.master, FcntlArg::F_GETFL)?);
    fcntl(&pair.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((
        Master(register(std::fs::File::from(pair.master))?),
        pair.slave,
    ))
}

/// `file` watched by the runtime's reactor.
#[allow(unsafe_code)]
fn register(file: std::fs::File) -> std::io::Result<AsyncFd<std::fs::File>> {
    // SAFETY: the `File` owns its descriptor, open until the `File` is
    // dropped, which only the `AsyncFd` can do, and `as_raw_fd` of a
    // `File` always gives that one descriptor.
    Ok(unsafe { AsyncFd::register(file) }?)
}

impl AsyncRead for Master {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|file| (&mut file.get_ref()).read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Linux's way of saying every holder of the other side
                // closed it: the end of the output.
                Ok(Err(err)) if err.raw_os_error() == Some(libc::EIO) => {
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_child_sees_a_terminal_and_its_output_ends_when_it_exits() {
        let (mut master, slave) = open().unwrap();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "test -t 1 && echo tty; stty size"])
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        let mut out = String::new();
        master.read_to_string(&mut out).await.unwrap();
        assert!(child.wait().await.unwrap().success());
        assert_eq!(out, "tty\r\n40 120\r\n");
    }

    #[tokio::test]
    async fn neither_end_is_inherited_by_other_children() {
        use std::os::fd::AsRawFd;
        let (master, slave) = open().unwrap();
        let fds = format!(
            "ls /proc/self/fd/{} /proc/self/fd/{} 2>/dev/null | wc -l",
            master.0.get_ref().as_raw_fd(),
            slave.as_raw_fd()
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &fds])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    }
}
