//! The runtime's worker threads give back what other threads freed for
//! them: a burst allocated on a worker and dropped elsewhere leaves the
//! process once the workers next go idle.

use std::time::Duration;

/// Anonymous resident memory of this process, in KiB.
fn anonymous_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
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
