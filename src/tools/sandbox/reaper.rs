//! Under Landlock, every process of a command ends with it, detached or
//! not. Between fork and exec the child enters the command's Landlock
//! domain and becomes a *reaper*: a child subreaper that forks the command
//! into a domain nested in its own, then only waits. What the command
//! leaves behind (`setsid -f`, `nohup … &`, a double fork) is re-parented
//! to the reaper as its parents end; when the command itself ends, the
//! reaper kills every process it can signal, which Landlock's signal
//! scoping makes exactly the processes of its domain and the domains
//! nested in it (this command's, never the daemon's or another
//! command's), reaps them, and exits as the command did.
//!
//! The nested domain only scopes signals: the command cannot signal its
//! reaper, so it cannot end it to escape. The daemon ends a command through
//! its reaper ([`Ending`]): SIGTERM is passed on to all of the command's
//! processes, and [`FORCE`] kills them all; SIGKILL would end the reaper
//! alone.

use std::os::fd::RawFd;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// What the daemon sends a reaper to kill every process of its command.
const FORCE: Signal = Signal::SIGUSR1;

/// Signals a reaper passes on to every process of its command.
const PASSED_ON: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Splits the child being prepared into the reaper, which never returns,
/// and the command, which returns to be executed inside the domain of the
/// ruleset `nested`. Runs between fork and exec, after the child entered
/// the command's own Landlock domain: raw system calls only.
#[allow(unsafe_code)]
pub(super) fn split(nested: RawFd) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers and on signal sets on this
    // stack frame. The command's half is a raw clone with only SIGCHLD,
    // as fork(2) without glibc's fork handlers: those take the C
    // allocator's locks, which another thread of the daemon may have held
    // when this child was forked from it.
    unsafe {
        // A fork of the daemon holds its memory: nothing may read it
        // through /proc or a core dump, whatever signal the command passes
        // on to it when it ends (exec makes the command dumpable again).
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // Children are waited for, not discarded, and only their ends wake
        // the reaper (not their stops and continues, which a command could
        // make by the thousand).
        let mut child: libc::sigaction = std::mem::zeroed();
        child.sa_sigaction = libc::SIG_DFL;
        child.sa_flags = libc::SA_NOCLDSTOP;
        if libc::sigaction(libc::SIGCHLD, &child, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut watched: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut watched);
        // The terminal's stop signals are taken in and ignored.
        let ignored = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];
        for signal in [libc::SIGCHLD, FORCE as libc::c_int]
            .into_iter()
            .chain(PASSED_ON)
            .chain(ignored)
        {
            libc::sigaddset(&mut watched, signal);
        }
        let mut before: libc::sigset_t = std::mem::zeroed();
        if libc::sigprocmask(libc::SIG_BLOCK, &watched, &mut before) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let flags = libc::SIGCHLD as libc::c_ulong;
        match libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                if libc::syscall(libc::SYS_landlock_restrict_self, nested, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
            command => reap(command as libc::pid_t, &watched),
        }
    }
}

/// The reaper's life: waits for every child, passes signals on, kills
/// every process of its domain once `command` has ended, and exits as the
/// command did once none is left.
#[allow(unsafe_code)]
unsafe fn reap(command: libc::pid_t, watched: &libc::sigset_t) -> ! {
    // SAFETY: system calls on integers and on the caller's signal set; no
    // allocation, no lock.
    unsafe {
        // No descriptor of the command's (its output, the spawn's error
        // pipe) stays open here.
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut ended = None;
        loop {
            loop {
                let mut status = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL);
                if pid == command {
                    ended = Some(status);
                    libc::kill(-1, libc::SIGKILL);
                } else if pid == 0 {
                    break;
                } else if pid < 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
                {
                    // None left.
                    exit_as(ended.unwrap_or(127 << 8));
                }
            }
            match libc::sigwaitinfo(watched, std::ptr::null_mut()) {
                s if s == FORCE as libc::c_int => {
                    libc::kill(-1, libc::SIGKILL);
                }
                s if PASSED_ON.contains(&s) => {
                    libc::kill(-1, s);
                }
                _ => {}
            }
        }
    }
}

/// Ends this process as a child that ended with wait status `status`
/// did: with its exit code, or by its signal (dumping no core).
#[allow(unsafe_code)]
unsafe fn exit_as(status: libc::c_int) -> ! {
    // SAFETY: system calls on integers and a signal set on this frame.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// How the daemon ends a command it started, by the pid of the process it
/// spawned (`leader`): under Landlock the command's reaper, otherwise the
/// leader of the command's process group.
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    leader: Option<u32>,
    reaped: bool,
}

impl Ending {
    /// The ending of the process `leader`, a reaper when `reaped`.
    pub fn new(leader: Option<u32>, reaped: bool) -> Self {
        Self { leader, reaped }
    }

    /// Asks every process of the command to stop (SIGTERM).
    pub fn ask(&self) {
        self.send(false);
    }

    /// Kills every process of the command.
    pub fn force(&self) {
        self.send(true);
    }

    /// Once the command has ended: kills what it left in its process group.
    /// A reaper has killed all it left before it exited.
    pub fn leftovers(&self) {
        if !self.reaped {
            self.force();
        }
    }

    /// Forces the end of the command unless it is [`Unfinished::finished`]
    /// first: for a caller that may be dropped while it waits.
    pub fn until_finished(self) -> Unfinished {
        Unfinished(Some(self))
    }

    fn send(&self, force: bool) {
        let Some(pid) = self.leader.and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        let pid = Pid::from_raw(pid);
        let _ = match (self.reaped, force) {
            (true, true) => kill(pid, FORCE),
            (true, false) => kill(pid, Signal::SIGTERM),
            (false, true) => killpg(pid, Signal::SIGKILL),
            (false, false) => killpg(pid, Signal::SIGTERM),
        };
    }
}

/// A command whose end was not seen yet: forced when dropped.
#[derive(Debug)]
pub struct Unfinished(Option<Ending>);

impl Unfinished {
    /// The command was waited for: nothing is left to end (its pid may
    /// already be another process's).
    pub fn finished(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(ending) = self.0.take() {
            ending.force();
        }
    }
}
