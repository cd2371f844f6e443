//! A command's processes under the sandbox: what they start ends with
//! them, they reach no other process's limits, scheduling, leases or IPC,
//! and their end leaves other commands and the next one room.

use super::{Host, MODES, terminal};

/// Processes whose command line holds `token`, by pid.
fn running_with(token: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(token)
                .then_some(pid)
        })
        .collect()
}

/// Waits up to 10 s for no process to hold `token`; kills and names those
/// that still do.
async fn none_left_with(mode: &str, token: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut left = running_with(token);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = running_with(token);
    }
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(left.is_empty(), "{mode}: still running: {left:?}");
}

#[tokio::test]
async fn a_commands_detached_processes_end_with_it() {
    for mode in MODES {
        let host = Host::new();
        // Sleeps no one else runs: one in a session of its own, one left
        // in the background, one detached after the command tried to end
        // what watches it (under Landlock its reaper, its parent).
        let token = format!("{}.{}", 2900 + std::process::id() % 97, mode.len());
        let results = host
            .run(
                mode,
                &[terminal(&format!(
                    "setsid -f sleep {token}1; nohup sleep {token}2 >/dev/null 2>&1 & \
                     kill -KILL $PPID; echo kill=$?; setsid -f sleep {token}3; echo started"
                ))],
            )
            .await;
        assert!(results[0].contains("started"), "{mode}: {}", results[0]);
        if *mode == "landlock" {
            assert!(results[0].contains("kill=1"), "{mode}: {}", results[0]);
        }
        none_left_with(mode, &token).await;
    }
}

#[tokio::test]
async fn a_commands_reaper_is_bound_by_none_of_its_limits() {
    // Out of CPU time, the reaper would die and leave what the command
    // started running: the limits are the command's alone.
    let host = Host::with_sandbox("cpu_secs = 77\n");
    let results = host
        .run(
            "landlock",
            &[terminal(
                "echo own=$(ulimit -t); grep 'Max cpu time' /proc/$PPID/limits",
            )],
        )
        .await;
    assert!(results[0].contains("own=77"), "{}", results[0]);
    assert!(results[0].contains("unlimited"), "{}", results[0]);
}

#[tokio::test]
async fn a_command_changes_no_other_process_limits_or_scheduling() {
    // A CPU limit the daemon has already spent would kill it; so would
    // its reaper's. Each change writes what harms nothing, were it let
    // through.
    let calls = "/usr/bin/python3 -c \"import os, resource\nr = os.getppid()\nd = int(open('/proc/%d/stat' % r).read().rsplit(')', 1)[1].split()[1])\ndef t(name, f):\n    try:\n        f()\n        print(name + '=allowed')\n    except OSError:\n        print(name + '=refused')\nt('limit-reaper', lambda: resource.prlimit(r, resource.RLIMIT_CORE, (0, 0)))\nt('limit-daemon', lambda: resource.prlimit(d, resource.RLIMIT_CORE, (0, 0)))\nt('priority-daemon', lambda: os.setpriority(os.PRIO_PROCESS, d, os.getpriority(os.PRIO_PROCESS, d)))\nt('affinity-daemon', lambda: os.sched_setaffinity(d, os.sched_getaffinity(d)))\nt('limit-own', lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))\nt('limit-read', lambda: resource.prlimit(d, resource.RLIMIT_CORE))\nt('priority-own', lambda: os.setpriority(os.PRIO_PROCESS, 0, 5))\nt('affinity-own', lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))\"; nice -n 3 true && echo nice=ran";
    let host = Host::new();
    let results = host.run("landlock", &[terminal(calls)]).await;
    for refused in [
        "limit-reaper",
        "limit-daemon",
        "priority-daemon",
        "affinity-daemon",
    ] {
        assert!(
            results[0].contains(&format!("{refused}=refused")),
            "{}",
            results[0]
        );
    }
    for allowed in [
        "limit-own=allowed",
        "limit-read=allowed",
        "priority-own=allowed",
        "affinity-own=allowed",
        "nice=ran",
    ] {
        assert!(results[0].contains(allowed), "{}", results[0]);
    }
}

#[tokio::test]
async fn a_command_takes_no_file_lease_and_no_host_ipc() {
    // A lease on a file it owns would hold every other opener; System V
    // objects are the host's, not the command's (each made is removed at
    // once, were it let through).
    let calls = "/usr/bin/python3 -c \"import ctypes, fcntl, os\nlibc = ctypes.CDLL(None, use_errno=True)\nopen('leased', 'w').close()\nfd = os.open('leased', os.O_RDONLY)\ntry:\n    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n    print('lease=taken')\nexcept OSError:\n    print('lease=refused')\nn = libc.shmget(0, 4096, 0o1600)\nif n >= 0:\n    libc.shmctl(n, 0, None)\nprint('shm=' + ('made' if n >= 0 else 'refused'))\nn = libc.semget(0, 1, 0o1600)\nif n >= 0:\n    libc.semctl(n, 0, 0)\nprint('sem=' + ('made' if n >= 0 else 'refused'))\nlibc.mq_unlink(b'/switchboard-none')\nprint('mq_unlink=' + ('reached' if ctypes.get_errno() == 2 else 'refused'))\"";
    let host = Host::new();
    let results = host.run("landlock", &[terminal(calls)]).await;
    for refused in ["lease", "shm", "sem", "mq_unlink"] {
        assert!(
            results[0].contains(&format!("{refused}=refused")),
            "{}",
            results[0]
        );
    }
}

#[tokio::test]
async fn a_commands_end_leaves_other_commands_running() {
    // A background process of the session, then a command that leaves
    // something behind: its end kills what it left, not the other.
    for mode in MODES {
        let host = Host::new();
        let token = format!("{}.{}", 3100 + std::process::id() % 97, mode.len());
        let start = serde_json::json!({"action": "start", "command": format!("sleep {token}1")});
        let results = host
            .run(
                mode,
                &[
                    ("process", start.to_string()),
                    terminal(&format!("setsid -f sleep {token}2; echo left")),
                    terminal(&format!(
                        "pgrep -f 'slee[p] {token}1' >/dev/null && echo first=alive; \
                         pgrep -f 'slee[p] {token}2' >/dev/null || echo second=gone"
                    )),
                ],
            )
            .await;
        assert!(results[1].contains("left"), "{mode}: {}", results[1]);
        // (Under bubblewrap a command sees no other command's processes.)
        if *mode == "landlock" {
            assert!(results[2].contains("first=alive"), "{mode}: {}", results[2]);
        }
        assert!(results[2].contains("second=gone"), "{mode}: {}", results[2]);
        // The daemon's stop ended the background process.
        none_left_with(mode, &token).await;
    }
}

#[tokio::test]
async fn a_commands_processes_are_ended_with_it_and_leave_the_next_command_room() {
    // Forks until refused, leaving the children asleep.
    let forks = "/usr/bin/python3 -c \"import os, time\nn = 0\nfor i in range(60):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        os.setsid()\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint('forked', n)\"";
    for mode in MODES {
        let host = Host::with_sandbox("processes = 20\n").run_by_nobody();
        let results = host
            .run(mode, &[terminal(forks), terminal("echo next-command-ran")])
            .await;
        let forked: usize = results[0]
            .split("forked ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode}: {}", results[0]));
        assert!((1..20).contains(&forked), "{mode}: {}", results[0]);
        // The first command's children, in sessions of their own, ended
        // with it, and never counted against the next one.
        assert!(
            results[1].contains("next-command-ran"),
            "{mode}: {}",
            results[1]
        );
    }
}

#[tokio::test]
async fn a_command_under_landlock_makes_no_namespace_and_still_starts_threads() {
    let host = Host::new();
    let results = host
        .run(
            "landlock",
            &[
                terminal("unshare -U true; echo user=$?; unshare -r -p -f true; echo pid=$?"),
                terminal(
                    "/usr/bin/python3 -c \"import threading; t = threading.Thread(target=print, args=('thread-ran',)); t.start(); t.join()\"",
                ),
            ],
        )
        .await;
    assert!(results[0].contains("user=1"), "{}", results[0]);
    assert!(results[0].contains("pid=1"), "{}", results[0]);
    assert!(results[1].contains("thread-ran"), "{}", results[1]);
}
