//! The runtime's worker threads give back what other threads freed for
//! them: a burst allocated on a worker and dropped elsewhere leaves the
//! process once the workers next go idle. The pages of code start-up
//! touched leave too, and come back unchanged as they are run again.

use std::time::Duration;

/// The figure `name` (in KiB) of a `/proc/self` file of `Name: N kB` lines.
fn kib(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// File-backed resident memory of this process, in KiB, counted exactly
/// (the page tables walked, not the status file's per-CPU counters).
fn file_kib() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    kib(&rollup, "Rss:") - kib(&rollup, "Anonymous:")
}

/// Anonymous resident memory of this process, in KiB.
fn anonymous_kib() -> u64 {
    kib(
        &std::fs::read_to_string("/proc/self/status").unwrap(),
        "RssAnon:",
    )
}

/// Allocates ~64 MiB in small blocks on a worker, drops them on this
/// (non-worker) thread, then keeps the runtime lightly busy for a while,
/// as a daemon's timers do. Returns the burst's size and what stayed, in
/// KiB.
fn burst(rt: &tokio::runtime::Runtime) -> (u64, u64) {
    let before = anonymous_kib();
    let blocks = rt.block_on(async {
        tokio::spawn(async {
            (0..320_000u32)
                .map(|i| vec![i as u8; 200].into_boxed_slice())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap()
    });
    let peak = anonymous_kib();
    drop(blocks);
    rt.block_on(async {
        for _ in 0..20 {
            tokio::spawn(async { tokio::time::sleep(Duration::from_millis(1)).await })
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    });
    let after = anonymous_kib();
    (peak.saturating_sub(before), after.saturating_sub(before))
}

#[test]
fn memory_freed_across_threads_goes_back_once_the_workers_idle() {
    const PROBE: &str = "SWITCHBOARD_MEMORY_PROBE";
    if std::env::var_os(PROBE).is_none() {
        crate::common::run_alone(
            "runtime::memory_freed_across_threads_goes_back_once_the_workers_idle",
            PROBE,
        );
        return;
    }
    // Without the hook, the blocks stay with the worker that made them.
    let plain = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (size, kept) = burst(&plain);
    println!("plain runtime: burst {size} KiB, kept {kept} KiB");
    assert!(size > 40_000, "the burst is resident: {size} KiB");
    assert!(
        kept > size / 2,
        "a plain runtime keeps the burst (control): {kept} of {size} KiB"
    );
    drop(plain);

    let daemon = switchboard::runtime::build().unwrap();
    let (size, kept) = burst(&daemon);
    println!("daemon runtime: burst {size} KiB, kept {kept} KiB");
    assert!(
        kept < size / 4,
        "the daemon's runtime gives the burst back: {kept} of {size} KiB kept"
    );
}

/// Work over much of the code and constant data: hashing, a regex, JSON,
/// formatting. Returns what a correct run gives.
fn workload() -> String {
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(b"abc"));
    let re = regex::Regex::new(r"^(\w+)@(\w+)\.com$").unwrap();
    let domain = re.captures("ops@example.com").unwrap()[2].to_string();
    let json: serde_json::Value = serde_json::from_str(r#"{"a":[1,2.5,"x"]}"#).unwrap();
    format!(
        "{digest} {domain} {json} {:.3}",
        std::f64::consts::PI.sqrt()
    )
}

#[test]
fn start_up_pages_leave_and_come_back_unchanged() {
    const PROBE: &str = "SWITCHBOARD_PAGES_PROBE";
    if std::env::var_os(PROBE).is_none() {
        crate::common::run_alone(
            "runtime::start_up_pages_leave_and_come_back_unchanged",
            PROBE,
        );
        return;
    }
    let expected = workload();
    assert_eq!(
        expected,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad example \
         {\"a\":[1,2.5,\"x\"]} 1.772"
    );
    let before = file_kib();
    let released = switchboard::runtime::release_startup_pages();
    let after = file_kib();
    println!("file-backed RSS {before} KiB, {released} bytes released, {after} KiB after");
    assert!(released / 1024 > 1024, "released {released} bytes");
    assert!(
        after < before / 2,
        "{before} KiB before, {after} KiB after releasing {released} bytes"
    );
    // The relocated constants stay (a vtable call, a static string).
    let shown: Box<dyn std::fmt::Display> = Box::new(42u8);
    assert_eq!(shown.to_string(), "42");
    assert_eq!(workload(), expected, "the code runs as before");
    assert!(file_kib() > after, "what ran came back");
    // A tokio runtime and a thread start on the released pages.
    let rt = switchboard::runtime::build().unwrap();
    let joined = rt.block_on(async { tokio::spawn(async { workload() }).await.unwrap() });
    assert_eq!(joined, expected);
}
