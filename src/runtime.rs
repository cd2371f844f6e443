//! The process's allocator and async runtime, and how the runtime's threads
//! give freed memory back.
//!
//! mimalloc keeps a heap per thread. A block freed on another thread than
//! the one that allocated it is queued on its page until the owning thread
//! collects that page, which it does as it allocates. A tokio worker that
//! falls idle after a burst therefore sat on everything the other threads
//! freed for it: after 100 000 webhook deliveries ~280 MiB stayed resident
//! for good, though nothing held it. Each worker now collects its heap as it
//! parks (at most every [`COLLECT_EVERY`]), so what was freed goes back to
//! mimalloc's arena, whose purge returns it to the OS.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The daemon allocates many small, short-lived buffers (JSON payloads,
/// prompts, HTTP bodies) across threads, where glibc's allocator spent a
/// quarter of the webhook ingest path (see benches/webhook_ingest.rs).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Shortest time between two collections on one worker thread: a busy
/// worker parks thousands of times a second, and a collection visits every
/// page of the thread's heap.
pub const COLLECT_EVERY: Duration = Duration::from_millis(100);

thread_local! {
    static LAST_COLLECT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The daemon's runtime: a worker thread per core, every session, adapter
/// and listener spread over them.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(collect_if_due)
        .build()
}

/// The runtime of a command at the terminal (`chat`, `sessions`, …): one
/// thread. It serves one person, so a second worker adds nothing but
/// wake-ups: on a multi-threaded runtime every await that another task
/// answers (a store statement, the model's HTTP response, a tool's
/// output) may wake the other worker to steal it, a futex round of its
/// own (PERFORMANCE.md, "CPU per turn"). SQLite runs on its connections'
/// threads, other blocking work on tokio's blocking pool.
pub fn build_terminal() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(collect_if_due)
        .build()
}

/// Collects this thread's heap unless it did so within [`COLLECT_EVERY`].
pub fn collect_if_due() {
    let now = Instant::now();
    let due = LAST_COLLECT
        .get()
        .is_none_or(|at| now - at >= COLLECT_EVERY);
    if due {
        LAST_COLLECT.set(Some(now));
        collect();
    }
}

/// Frees this thread's empty pages, taking in the blocks other threads
/// freed on them, and lets the arena purge what is unused.
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: `mi_collect` takes no pointers and touches only the calling
    // thread's own heap and mimalloc's internally synchronised arenas; it
    // may be called at any time from any thread.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

/// Descriptors the daemon keeps for itself beyond its HTTP connections:
/// storage, platform clients, MCP servers, child processes, files.
pub const RESERVED_DESCRIPTORS: u64 = 512;

/// Raises the soft limit on open files towards `wanted` (at most to the
/// hard limit, which only root can raise) and returns the soft limit now
/// in force. systemd and many shells start services at a soft 1024 whatever
/// the hard limit allows.
pub fn raise_descriptor_limit(wanted: u64) -> std::io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let target = wanted.min(hard);
    if target > soft {
        setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
        return Ok(target);
    }
    Ok(soft)
}
