//! The `switchboard` binary: everything lives in the library (the
//! allocator too, see `switchboard::runtime`).

fn main() -> std::process::ExitCode {
    switchboard::cli::main()
}
