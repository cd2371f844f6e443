//! The seccomp program of every sandboxed command: what Landlock does not
//! govern, refused by system call.
//!
//! - `socket(AF_UNIX, …)`: Landlock does not govern connecting to a UNIX
//!   socket by its path, and one (Docker's, PostgreSQL's, D-Bus) can be a
//!   way out. `socketpair` (pipes between a command's own processes) stays.
//! - io_uring: it creates sockets and opens files without those calls.
//! - Ownership and extended attributes (`chown`, `setxattr` families), and
//!   setuid / setgid bits in `chmod`: Landlock has no right for metadata, and
//!   a command of a daemon running as root still owns root's files.
//! - Kernel interfaces a command has no use for that widen the attack
//!   surface: `bpf`, `perf_event_open`, `userfaultfd`, the key ring.
//! - Calls that change another process of the same user, which Landlock
//!   does not govern: its resource limits (`prlimit64`: a CPU limit already
//!   spent kills it), its scheduling, CPU affinity, priority and I/O
//!   priority. A command may change its own (`ulimit`, `nice`, `taskset
//!   cmd`) and read another's limits; naming any other process, the daemon
//!   and its reapers included, is refused (a thread named by its id too).
//! - File leases (`fcntl(F_SETLEASE)`): a command's lease on a file it can
//!   read and owns makes every other opener, the daemon included, wait.
//! - `fallocate` and the `ioctl`s that do the same (`FS_IOC_RESVSP` and
//!   kin), which take disk space without writing it, faster than the disk's
//!   reserve is looked at ([`super::disk`]): they answer `EOPNOTSUPP`, as on
//!   a filesystem without them, and the C library's `posix_fallocate`
//!   writes the space instead.
//! - Under Landlock, System V IPC and `mq_unlink`: they are not paths, so
//!   Landlock does not govern them, and the command shares the host's IPC
//!   namespace, whose objects of its user it could read, remove, or leave
//!   behind. (Under bubblewrap its IPC namespace is its own.)
//! - System calls of another architecture (x32, `int 0x80`'s socketcall).
//! - Under Landlock, new namespaces (`unshare`, `clone` with a `CLONE_NEW*`
//!   flag, `setns`): a user namespace gives a command every capability
//!   inside it and much of the kernel to reach with them. `clone3`, whose
//!   flags a filter cannot read, answers ENOSYS, and the C library falls
//!   back to `clone`. (bubblewrap makes the namespaces itself after the
//!   filter is in place, so it is not refused them.)

/// The audit architecture of this build's system calls (seccomp(2)).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
/// System call numbers at and past it are x32's, another way in on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_FROM: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
const X32_FROM: u32 = u32::MAX;

/// `fchmodat2` (Linux 6.6) and `setxattrat` (6.13): the same number on
/// every architecture.
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;

/// Refused outright (EPERM).
fn refused() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_chown, libc::SYS_lchown]);
    calls
}

/// The flags of every kind of namespace; `CLONE_NEWTIME` only for
/// `unshare` (in `clone`'s flags its bit is part of the exit signal).
const NAMESPACES: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;
const CLONE_NEWTIME: u32 = 0x80;

/// `chmod`-like calls and the index of their mode argument: refused when
/// the mode sets the setuid or setgid bit.
fn chmods() -> Vec<(i64, u32)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.push((libc::SYS_chmod, 1));
    calls
}

/// Calls that may name only the calling process: each `(argument,
/// value)` must hold, or the call is refused. `0` names the caller, and so
/// do `setpriority`'s `PRIO_PROCESS` and `ioprio_set`'s
/// `IOPRIO_WHO_PROCESS` with `0` (by user or by process group they would
/// reach the daemon, or the reaper, which shares the group).
fn own_only() -> Vec<(i64, Vec<(u32, u32)>)> {
    const IOPRIO_WHO_PROCESS: u32 = 1;
    vec![
        (libc::SYS_sched_setscheduler, vec![(0, 0)]),
        (libc::SYS_sched_setparam, vec![(0, 0)]),
        (libc::SYS_sched_setattr, vec![(0, 0)]),
        (libc::SYS_sched_setaffinity, vec![(0, 0)]),
        (libc::SYS_setpriority, vec![(0, libc::PRIO_PROCESS), (1, 0)]),
        (libc::SYS_ioprio_set, vec![(0, IOPRIO_WHO_PROCESS), (1, 0)]),
    ]
}

/// `ioctl` requests that take or give back disk space without writing, as
/// `fallocate` does (and without the file size limit): `FS_IOC_RESVSP`,
/// `FS_IOC_RESVSP64`, `FS_IOC_UNRESVSP`, `FS_IOC_UNRESVSP64`,
/// `FS_IOC_ZERO_RANGE` (`_IOW('X', n, struct space_resv)`).
fn space_ioctls() -> [u32; 5] {
    [
        0x4030_5828,
        0x4030_582a,
        0x4030_5829,
        0x4030_582b,
        0x4030_5839,
    ]
}

/// System V IPC and message queues' unlinking, refused under Landlock.
fn host_ipc() -> Vec<i64> {
    vec![
        libc::SYS_shmget,
        libc::SYS_shmat,
        libc::SYS_shmctl,
        libc::SYS_shmdt,
        libc::SYS_semget,
        libc::SYS_semop,
        libc::SYS_semtimedop,
        libc::SYS_semctl,
        libc::SYS_msgget,
        libc::SYS_msgsnd,
        libc::SYS_msgrcv,
        libc::SYS_msgctl,
        libc::SYS_mq_unlink,
    ]
}

/// Where a jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    Ahead(u8),
    Allow,
    Eperm,
    Eacces,
    Enosys,
    Eopnotsupp,
}

const LD: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`: the call's number, its architecture,
/// and the low half of argument `n` (little-endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
fn arg(n: u32) -> u32 {
    16 + 8 * n
}

/// The program, built once in the daemon; the child only points the
/// kernel at it. `no_namespaces`: new namespaces are refused too.
/// `no_file_writes` (a command that may only remove, [`super::disk`]):
/// files are not mapped shared either, as a write through such a mapping
/// knows no file size limit.
pub(super) fn program(no_namespaces: bool, no_file_writes: bool) -> Vec<libc::sock_filter> {
    let mut ops: Vec<(u16, u32, To, To)> = vec![
        (LD, ARCH, To::Next, To::Next),
        (JEQ, AUDIT_ARCH, To::Next, To::Eperm),
        (LD, NR, To::Next, To::Next),
        (JGE, X32_FROM, To::Eperm, To::Next),
    ];
    for call in refused() {
        ops.push((JEQ, call as u32, To::Eperm, To::Next));
    }
    // `prlimit64` changes only the caller's limits; it reads anyone's
    // (its new limits, a pointer, NULL in both halves).
    ops.extend([
        (JEQ, libc::SYS_prlimit64 as u32, To::Next, To::Ahead(6)),
        (LD, arg(0), To::Next, To::Next),
        (JEQ, 0, To::Allow, To::Next),
        (LD, arg(2), To::Next, To::Next),
        (JEQ, 0, To::Next, To::Eperm),
        (LD, arg(2) + 4, To::Next, To::Next),
        (JEQ, 0, To::Allow, To::Eperm),
    ]);
    ops.push((JEQ, libc::SYS_fallocate as u32, To::Eopnotsupp, To::Next));
    if no_file_writes {
        // Shared, and not anonymous (no descriptor, -1 in the low half).
        ops.extend([
            (JEQ, libc::SYS_mmap as u32, To::Next, To::Ahead(4)),
            (LD, arg(3), To::Next, To::Next),
            (JSET, libc::MAP_SHARED as u32, To::Next, To::Allow),
            (LD, arg(4), To::Next, To::Next),
            (JEQ, u32::MAX, To::Allow, To::Eacces),
        ]);
    }
    // The kernel reads `ioctl`'s request as 32 bits: the low half is it.
    let reserving = space_ioctls();
    let skip = u8::try_from(reserving.len() + 1).expect("a few requests");
    ops.push((JEQ, libc::SYS_ioctl as u32, To::Next, To::Ahead(skip)));
    ops.push((LD, arg(1), To::Next, To::Next));
    for (i, request) in reserving.into_iter().enumerate() {
        let other = if i + 1 == reserving.len() {
            To::Allow
        } else {
            To::Next
        };
        ops.push((JEQ, request, To::Eopnotsupp, other));
    }
    ops.push((JEQ, libc::SYS_fcntl as u32, To::Next, To::Ahead(2)));
    ops.push((LD, arg(1), To::Next, To::Next));
    ops.push((JEQ, libc::F_SETLEASE as u32, To::Eperm, To::Allow));
    for (call, holds) in own_only() {
        let skip = u8::try_from(2 * holds.len()).expect("a few arguments");
        ops.push((JEQ, call as u32, To::Next, To::Ahead(skip)));
        for (i, &(at, value)) in holds.iter().enumerate() {
            let then = if i + 1 == holds.len() {
                To::Allow
            } else {
                To::Next
            };
            ops.push((LD, arg(at), To::Next, To::Next));
            ops.push((JEQ, value, then, To::Eperm));
        }
    }
    ops.push((JEQ, libc::SYS_socket as u32, To::Next, To::Ahead(2)));
    ops.push((LD, arg(0), To::Next, To::Next));
    ops.push((JEQ, libc::AF_UNIX as u32, To::Eacces, To::Allow));
    let mut flagged: Vec<(i64, u32, u32)> = chmods()
        .into_iter()
        .map(|(call, mode)| (call, mode, 0o6000))
        .collect();
    if no_namespaces {
        for call in host_ipc() {
            ops.push((JEQ, call as u32, To::Eperm, To::Next));
        }
        ops.push((JEQ, libc::SYS_setns as u32, To::Eperm, To::Next));
        ops.push((JEQ, libc::SYS_clone3 as u32, To::Enosys, To::Next));
        flagged.push((libc::SYS_unshare, 0, NAMESPACES | CLONE_NEWTIME));
        flagged.push((libc::SYS_clone, 0, NAMESPACES));
    }
    // Each ends the program: the accumulator then holds an argument.
    for (call, at, bits) in flagged {
        ops.push((JEQ, call as u32, To::Next, To::Ahead(2)));
        ops.push((LD, arg(at), To::Next, To::Next));
        ops.push((JSET, bits, To::Eperm, To::Allow));
    }
    let allow = ops.len();
    let (eperm, eacces, enosys, eopnotsupp) = (allow + 1, allow + 2, allow + 3, allow + 4);
    let mut program: Vec<libc::sock_filter> = ops
        .iter()
        .enumerate()
        .map(|(i, &(code, k, jt, jf))| {
            let jump = |to: To| -> u8 {
                let target = match to {
                    To::Next => i + 1,
                    To::Ahead(n) => i + 1 + usize::from(n),
                    To::Allow => allow,
                    To::Eperm => eperm,
                    To::Eacces => eacces,
                    To::Enosys => enosys,
                    To::Eopnotsupp => eopnotsupp,
                };
                u8::try_from(target - i - 1).expect("the program is short")
            };
            libc::sock_filter {
                code,
                jt: jump(jt),
                jf: jump(jf),
                k,
            }
        })
        .collect();
    for k in [
        libc::SECCOMP_RET_ALLOW,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        libc::SECCOMP_RET_ERRNO | libc::EOPNOTSUPP as u32,
    ] {
        program.push(libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k,
        });
    }
    program
}
