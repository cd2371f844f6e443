//! Files and directories private to the daemon's user: the data directory,
//! the database and the workspaces are created `0700` / `0600` whatever the
//! umask the process was started with.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` (and missing parents) as `0700`; one that already exists
/// is left as its owner set it.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Creates `file` empty as `0600` if it does not exist (SQLite then gives
/// its journal and WAL files the same mode); an existing one is left as is.
pub fn private_file(file: &Path) -> std::io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
