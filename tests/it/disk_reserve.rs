//! The free space commands leave (`tools.sandbox.disk_reserve_mb`): a
//! command that writes past it is ended, the next may remove what it wrote,
//! below half of it a command may only remove, and a background process is
//! ended the same way — under Landlock and under bubblewrap. Each test sets
//! the reserve just under what its own temporary directory's filesystem has
//! free, so the commands write a few hundred MiB inside that directory and
//! nothing else is touched.

use crate::common;

use std::path::Path;

use serde_json::{Value, json};
use switchboard::config::{Config, Env, SandboxMode};
use switchboard::tools::ToolRuntime;

use common::call;

const MODES: [SandboxMode; 2] = [SandboxMode::Landlock, SandboxMode::Bwrap];

/// What the script writes, at most: far past the room each test leaves.
const FILL: &str =
    "for i in $(seq 1 16); do head -c 128M /dev/zero > fill$i.bin || break; done; echo finished";

/// MiB free to unprivileged writers on the filesystem of `path`.
fn free_mib(path: &Path) -> u64 {
    let stat = nix::sys::statvfs::statvfs(path).unwrap();
    (stat.blocks_available() * stat.fragment_size()) >> 20
}

/// MiB of files directly in `dir`.
fn written_mib(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum::<u64>()
        >> 20
}

/// Inodes free to unprivileged writers on the filesystem of `path`.
fn free_inodes(path: &Path) -> u64 {
    nix::sys::statvfs::statvfs(path).unwrap().files_available()
}

fn runtime(mode: SandboxMode, reserve_mb: u64) -> ToolRuntime {
    runtime_keeping(mode, reserve_mb, 0)
}

fn runtime_keeping(mode: SandboxMode, reserve_mb: u64, reserve_inodes: u64) -> ToolRuntime {
    let mut config = Config::default();
    config.tools.sandbox.mode = mode;
    config.tools.sandbox.disk_reserve_mb = reserve_mb;
    config.tools.sandbox.disk_reserve_inodes = reserve_inodes;
    ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap()
}

/// A runtime whose reserve leaves `room` MiB on `dir`'s filesystem.
fn leaving(mode: SandboxMode, dir: &Path, room: u64) -> ToolRuntime {
    let free = free_mib(dir);
    assert!(
        free > room + 64,
        "{free} MiB free is too little for the test"
    );
    runtime(mode, free - room)
}

#[tokio::test]
async fn a_command_filling_the_disk_is_ended_at_the_reserve() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        let rt = leaving(mode, dir.path(), 256);
        let out = call(
            &rt,
            "terminal",
            json!({"command": FILL, "timeout": 120}),
            &ctx,
        )
        .await;
        let stopped = out["stopped"].as_str().unwrap_or_default();
        assert!(
            stopped.contains("tools.sandbox.disk_reserve_mb"),
            "{mode:?}: {out}"
        );
        assert_eq!(out["timed_out"], false, "{mode:?}: {out}");
        assert!(
            !out["output"].as_str().unwrap().contains("finished"),
            "{mode:?}: {out}"
        );
        // Ended within a few polls of the reserve, far short of 2 GiB
        // (other tests writing beside it may leave it less room).
        let written = written_mib(&ctx.workspace);
        assert!(written < 1024, "{mode:?}: {written} MiB written");
        // Below the reserve now, a command may still remove what it wrote.
        let out = call(
            &rt,
            "terminal",
            json!({"command": "rm fill*.bin && echo removed"}),
            &ctx,
        )
        .await;
        assert_eq!(out["output"], "removed\n", "{mode:?}: {out}");
        assert_eq!(written_mib(&ctx.workspace), 0, "{mode:?}");
    }
}

/// Appends to a file, maps it shared (a write through the mapping knows
/// no file size limit), then removes it.
const APPEND_THEN_REMOVE: &str = "head -c 1000 /dev/zero >> kept.bin; echo append=$?; \
     python3 -c \"import mmap, os; mmap.mmap(os.open('kept.bin', os.O_RDWR), 4096)\" 2>/dev/null; echo map=$?; \
     rm kept.bin && echo removed";

#[tokio::test]
async fn below_half_the_reserve_a_command_may_only_remove() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        std::fs::write(ctx.workspace.join("kept.bin"), [0u8; 4096]).unwrap();
        // Less than half the reserve free.
        let rt = runtime(mode, 2 * free_mib(dir.path()) + 1024);
        let out = call(
            &rt,
            "terminal",
            json!({ "command": APPEND_THEN_REMOVE }),
            &ctx,
        )
        .await;
        let said = out["disk"].as_str().unwrap_or_default();
        assert!(
            said.contains("could remove files but not write them")
                && said.contains("disk_reserve_mb"),
            "{mode:?}: {out}"
        );
        let output = out["output"].as_str().unwrap_or_default();
        assert!(
            output.contains("removed") && !output.contains("append=0"),
            "{mode:?}: {out}"
        );
        assert!(output.contains("map=1"), "{mode:?}: {out}");
        assert!(!ctx.workspace.join("kept.bin").exists(), "{mode:?}");
        let out = call(
            &rt,
            "process",
            json!({"action": "start", "command": "true"}),
            &ctx,
        )
        .await;
        assert!(
            out["disk"]
                .as_str()
                .is_some_and(|s| s.contains("could remove files")),
            "{mode:?}: {out}"
        );
        // A reserve of 0 is none.
        let rt = runtime(mode, 0);
        let out = call(
            &rt,
            "terminal",
            json!({ "command": "echo x > new.txt" }),
            &ctx,
        )
        .await;
        assert_eq!(out["exit_code"], 0, "{mode:?}: {out}");
        assert_eq!(out.get("disk"), None, "{mode:?}: {out}");
    }
}

#[tokio::test]
async fn a_background_process_filling_the_disk_is_ended_at_the_reserve() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        let rt = leaving(mode, dir.path(), 256);
        let started = call(
            &rt,
            "process",
            json!({"action": "start", "command": format!("{FILL}; sleep 600")}),
            &ctx,
        )
        .await;
        let id = started["process_id"].as_str().unwrap().to_string();
        let done: Value = call(
            &rt,
            "process",
            json!({"action": "wait", "process_id": id, "timeout": 60}),
            &ctx,
        )
        .await;
        assert_eq!(done["running"], false, "{mode:?}: {done}");
        assert!(
            done["stopped"]
                .as_str()
                .is_some_and(|s| s.contains("disk_reserve_mb")),
            "{mode:?}: {done}"
        );
        let written = written_mib(&ctx.workspace);
        assert!(written < 1024, "{mode:?}: {written} MiB written");
    }
}

/// What the script creates, at most: empty files, far past the room the
/// test leaves.
const MANY: &str = "for i in $(seq 1 30000); do : > empty$i; done; echo finished";

#[tokio::test]
async fn a_command_making_files_without_end_is_ended_at_the_inode_reserve() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        let free = free_inodes(dir.path());
        assert!(
            free > 100_000,
            "{free} free inodes are too few for the test"
        );
        let rt = runtime_keeping(mode, 0, free - 3000);
        let out = call(
            &rt,
            "terminal",
            json!({"command": MANY, "timeout": 120}),
            &ctx,
        )
        .await;
        assert!(
            out["stopped"]
                .as_str()
                .is_some_and(|s| s.contains("tools.sandbox.disk_reserve_inodes")),
            "{mode:?}: {out}"
        );
        assert!(
            !out["output"].as_str().unwrap().contains("finished"),
            "{mode:?}: {out}"
        );
        let made = std::fs::read_dir(&ctx.workspace).unwrap().count();
        assert!(made < 30_000, "{mode:?}: {made} files made");
    }
}

/// `FS_IOC_RESVSP64` of 64 MiB (a `struct space_resv`): what `fallocate`
/// does, by `ioctl`.
const RESVSP: &str = "python3 -c \"import fcntl, os, struct; fd = os.open('reserved.bin', os.O_CREAT | os.O_WRONLY); \
     fcntl.ioctl(fd, 0x4030582a, struct.pack('hhxxxxqqiI4i', 0, 0, 0, 64 << 20, 0, 0, 0, 0, 0, 0))\"; \
     echo resvsp=$?";

#[tokio::test]
async fn fallocate_takes_no_space_unwritten_and_posix_fallocate_still_works() {
    // `fallocate` would take gigabytes between two looks at the reserve.
    let script = format!(
        "fallocate -l 8M taken.bin; echo fallocate=$?; {RESVSP}; \
         python3 -c \"import os; fd = os.open('written.bin', os.O_CREAT | os.O_WRONLY); \
         os.posix_fallocate(fd, 0, 1 << 20); print('size', os.fstat(fd).st_size)\""
    );
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let ctx = common::tools::ctx(dir.path());
        let rt = runtime(mode, 1024);
        let out = call(&rt, "terminal", json!({ "command": script }), &ctx).await;
        let output = out["output"].as_str().unwrap_or_default();
        assert!(output.contains("fallocate=1"), "{mode:?}: {out}");
        assert!(
            output.contains("Errno 95") && output.contains("resvsp=1"),
            "{mode:?}: {out}"
        );
        let reserved = std::fs::metadata(ctx.workspace.join("reserved.bin")).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::blocks(&reserved),
            0,
            "{mode:?}"
        );
        assert!(output.contains("size 1048576"), "{mode:?}: {out}");
    }
}

/// Writes a file in each place named, saying which it could, then makes a
/// user namespace (where a tmpfs of its own could be mounted), saying if
/// it could.
const TOUCH_EACH: &str = "for p in / /dev /dev/shm \"$HIDDEN\" \"$TMPDIR\" .; do touch \"$p/made\" 2>/dev/null && echo \"wrote $p\"; done; \
     unshare -U true 2>/dev/null && echo 'made a user namespace'; true";

#[tokio::test]
async fn under_bubblewrap_no_file_system_in_memory_is_writable_or_can_be_made() {
    // A command filling them would fill the host's memory; the disk's
    // reserve does not look at them.
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let shown = dir.path().join("shown");
    let hidden = shown.join("hidden");
    std::fs::create_dir_all(&hidden).unwrap();
    let mut config = Config::default();
    config.tools.sandbox.mode = SandboxMode::Bwrap;
    config.tools.sandbox.read_only = vec![shown.clone()];
    config.tools.sandbox.hidden = vec![hidden.clone()];
    let rt = ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    let command = format!("HIDDEN={}; {TOUCH_EACH}", hidden.display());
    let out = call(&rt, "terminal", json!({ "command": command }), &ctx).await;
    let wrote: Vec<&str> = out["output"].as_str().unwrap_or_default().lines().collect();
    // /dev/shm is a tmpfs of its own, bounded (below).
    assert_eq!(wrote, ["wrote /dev/shm", "wrote /tmp", "wrote ."], "{out}");
}

/// Writes a MiB into /dev/shm, then takes a POSIX semaphore there as
/// Python's multiprocessing does.
const USE_SHM: &str = "head -c 1M /dev/zero > /dev/shm/written && \
     python3 -c 'import multiprocessing as m; l = m.Lock(); l.acquire(); l.release(); print(\"locked\")'";

/// /dev/shm is there, and what is written to it lands in the command's
/// private temporary directory, on disk under the reserve (a tmpfs would
/// be the host's memory, and its files would have no bound).
#[tokio::test]
async fn under_bubblewrap_dev_shm_is_the_private_temporary_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = common::tools::ctx(dir.path());
    let mut config = Config::default();
    config.tools.sandbox.mode = SandboxMode::Bwrap;
    let rt = ToolRuntime::build(
        &config,
        &Env::default(),
        switchboard::adapters::platforms(&config),
    )
    .unwrap();
    let out = call(&rt, "terminal", json!({ "command": USE_SHM }), &ctx).await;
    assert_eq!(out["output"], "locked\n", "{out}");
    let tmp = ctx
        .workspace
        .parent()
        .unwrap()
        .join(".tmp")
        .join(ctx.workspace.file_name().unwrap());
    let written = std::fs::metadata(tmp.join("written")).unwrap();
    assert_eq!(written.len(), 1 << 20);
}
