//! The `switchboard` binary: everything lives in the library.

/// mimalloc: the daemon allocates many small, short-lived buffers (JSON
/// payloads, prompts, HTTP bodies) across threads, where glibc's allocator
/// spent a quarter of the webhook ingest path (see benches/webhook_ingest.rs).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    switchboard::cli::main()
}
