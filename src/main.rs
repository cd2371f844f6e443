//! The `switchboard` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    switchboard::cli::main()
}
