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

/// Unmaps the pages of code and read-only data that start-up touched, once
/// the daemon is ready, and returns how many bytes were resident.
///
/// Start-up runs code the daemon never runs again (configuration,
/// migrations, TLS set-up, every component's wiring), spread over the whole
/// text, and the kernel maps up to 64 KiB around each page it faults in:
/// 9 MiB of the executable stayed mapped for good, most of the idle
/// daemon's memory. What idle and later work runs comes back from the page
/// cache on first use, without reading the disk; the rest stays in the
/// cache, which the kernel reclaims before it reclaims mapped code.
///
/// Only a read-only private mapping of a file holding no copied (anonymous)
/// page is dropped (the executable's and the shared libraries' code and
/// constants): reading it again gives the same bytes from the file, as it
/// would after the kernel reclaimed the pages itself. The relocated
/// read-only data (RELRO) holds copies and is kept.
pub fn release_startup_pages() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    Mapping::parse(&smaps)
        .iter()
        .filter(|m| m.file_backed && !m.writable && m.private && m.anonymous_kib == 0)
        .filter(|m| drop_pages(m.start, m.end - m.start))
        .map(|m| m.resident_kib * 1024)
        .sum()
}

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, Default)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    private: bool,
    /// A file's pages (an inode other than 0), not memory of its own.
    file_backed: bool,
    resident_kib: usize,
    anonymous_kib: usize,
}

impl Mapping {
    /// Every mapping in `smaps`, in order.
    fn parse(smaps: &str) -> Vec<Mapping> {
        let mut all: Vec<Mapping> = Vec::new();
        for line in smaps.lines() {
            let mut fields = line.split_ascii_whitespace();
            let first = fields.next().unwrap_or_default();
            if let Some((start, end)) = first.split_once('-') {
                let (Ok(start), Ok(end)) = (
                    usize::from_str_radix(start, 16),
                    usize::from_str_radix(end, 16),
                ) else {
                    continue;
                };
                let perms = fields.next().unwrap_or_default().as_bytes();
                // offset, device, inode
                let inode = fields.nth(2).unwrap_or("0");
                all.push(Mapping {
                    start,
                    end,
                    writable: perms.get(1) != Some(&b'-'),
                    private: perms.get(3) == Some(&b'p'),
                    file_backed: inode != "0",
                    ..Mapping::default()
                });
                continue;
            }
            let kib = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match (first, all.last_mut()) {
                ("Rss:", Some(m)) => m.resident_kib = kib,
                ("Anonymous:", Some(m)) => m.anonymous_kib = kib,
                _ => {}
            }
        }
        all
    }
}

/// Drops the page-table entries of `len` bytes from `start`.
#[allow(unsafe_code)]
fn drop_pages(start: usize, len: usize) -> bool {
    // SAFETY: the range is one whole private, read-only mapping of a file
    // in which no page was copied (`release_startup_pages` checks both), and
    // nothing in the process makes it writable. After MADV_DONTNEED every
    // page of it is read again from the same file on first access, with the
    // same bytes, so no code or data any reference points into changes.
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 }
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
