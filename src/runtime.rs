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

/// Unmaps the pages of the executable's code and constants that start-up
/// touched, once the daemon is ready, and returns the bytes of address
/// range let go.
///
/// Start-up runs code the daemon never runs again (configuration,
/// migrations, TLS set-up, every component's wiring), spread over the whole
/// text, and the kernel maps up to 64 KiB around each page it faults in:
/// 9 MiB of the executable stayed mapped for good, most of the idle
/// daemon's memory. What idle and later work runs comes back from the page
/// cache on first use, without reading the disk; the rest stays in the
/// cache, which the kernel reclaims before it reclaims mapped code.
///
/// Only the executable's loadable segments that are never writable are
/// let go (its code and read-only data; the relocated constants are in a
/// writable segment and stay), found by the dynamic loader's own list of
/// what it mapped, and of them only the pages that still hold their file's
/// bytes (`/proc/self/pagemap`).
pub fn release_startup_pages() -> usize {
    let mut found = Segments::default();
    read_only_segments(&mut found);
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return 0;
    };
    found.ranges[..found.len]
        .iter()
        .map(|&(start, end)| drop_unchanged(&pagemap, found.page, start, end))
        .sum()
}

/// The executable's never-writable loadable segments, as whole pages.
#[derive(Debug, Default)]
struct Segments {
    page: usize,
    ranges: [(usize, usize); 8],
    len: usize,
}

/// Finds the executable's never-writable segments.
#[allow(unsafe_code)]
fn read_only_segments(found: &mut Segments) {
    // SAFETY: sysconf takes no pointers.
    found.page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
    if found.page == 0 {
        return;
    }
    // SAFETY: `dl_iterate_phdr` calls `list_read_only_segments` with valid
    // program headers for each loaded object; `found` outlives the call and
    // only the callback uses it meanwhile.
    unsafe {
        libc::dl_iterate_phdr(
            Some(list_read_only_segments),
            std::ptr::from_mut(found).cast(),
        );
    }
}

/// `dl_iterate_phdr`'s callback: lists, for the first object (the
/// executable, whose name is empty), each loadable segment that is not
/// writable, as the whole pages inside the part its file backs; then stops
/// the walk. It allocates nothing and calls nothing (the loader's lock is
/// held).
#[allow(unsafe_code)]
unsafe extern "C" fn list_read_only_segments(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid `info`, and `data` is the
    // `Segments` that `read_only_segments` passed.
    let (info, found) = unsafe { (&*info, &mut *data.cast::<Segments>()) };
    // SAFETY: a non-null name is a NUL-terminated string the loader owns.
    let main = info.dlpi_name.is_null() || unsafe { *info.dlpi_name } == 0;
    if !main || info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: a non-null `dlpi_phdr` points at `dlpi_phnum` headers.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let page = found.page;
    for h in headers {
        if h.p_type != libc::PT_LOAD
            || h.p_flags & libc::PF_W != 0
            || found.len == found.ranges.len()
        {
            continue;
        }
        let begin = info.dlpi_addr as usize + h.p_vaddr as usize;
        let start = begin.next_multiple_of(page);
        let end = (begin + h.p_filesz.min(h.p_memsz) as usize) / page * page;
        if end > start {
            found.ranges[found.len] = (start, end);
            found.len += 1;
        }
    }
    1
}

/// Drops the pages of `start..end` that hold their file's own bytes (not
/// in memory, or mapped from the file) in runs, and returns their bytes. A
/// page copied in memory (a debugger's breakpoint, a probe, a text
/// relocation) or swapped out stays as it is.
fn drop_unchanged(pagemap: &std::fs::File, page: usize, start: usize, end: usize) -> usize {
    use std::os::unix::fs::FileExt;
    let pages = (end - start) / page;
    let mut entries = vec![0u8; pages * 8];
    if pagemap
        .read_exact_at(&mut entries, (start / page * 8) as u64)
        .is_err()
    {
        return 0;
    }
    let unchanged = |i: usize| {
        let mut entry = [0; 8];
        entry.copy_from_slice(&entries[i * 8..i * 8 + 8]);
        let entry = u64::from_ne_bytes(entry);
        let (present, swapped, file) = (entry >> 63 & 1, entry >> 62 & 1, entry >> 61 & 1);
        swapped == 0 && (present == 0 || file == 1)
    };
    let mut released = 0;
    let mut i = 0;
    while i < pages {
        if !unchanged(i) {
            i += 1;
            continue;
        }
        let first = i;
        while i < pages && unchanged(i) {
            i += 1;
        }
        let (at, len) = (start + first * page, (i - first) * page);
        if drop_pages(at, len) {
            released += len;
        }
    }
    released
}

/// Drops the page-table entries of `len` bytes from `at`.
#[allow(unsafe_code)]
fn drop_pages(at: usize, len: usize) -> bool {
    // SAFETY: the range is whole pages of a never-writable segment of the
    // executable, which stays mapped for the process's life, each of which
    // was just seen holding its file's own bytes (not in memory, or mapped
    // from the file: no copy, nothing swapped). After MADV_DONTNEED each is
    // read again from the same file, with the same bytes, so no code or
    // data any reference points into changes.
    unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 }
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
