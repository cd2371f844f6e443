//! Confinement of file tools to the session's workspace: a path is accepted
//! only if, with symlinks resolved, it stays inside the workspace root.

use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// The workspace directory of a session under `root`, created if missing.
/// The key is made filesystem-safe; a hash suffix keeps distinct keys apart.
/// It and a missing root are created `0700`.
pub fn session_dir(root: &Path, session_key: &str) -> std::io::Result<PathBuf> {
    let safe: String = session_key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let dir = root.join(format!(
        "{safe}-{:08x}",
        fnv1a(session_key.as_bytes()) as u32
    ));
    crate::private::private_dir(&dir)?;
    dir.canonicalize()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Resolves `input` (relative to the workspace, or absolute inside it) to
/// a canonical path inside `root` (which must be canonical). The path need
/// not exist; its deepest existing ancestor must be inside, and the rest
/// may not climb with `..`.
pub fn resolve(root: &Path, input: &str) -> Result<PathBuf, ToolError> {
    if input.contains('\0') {
        return Err(ToolError::Refused("path contains a NUL byte".into()));
    }
    if input.trim().is_empty() {
        return Err(ToolError::InvalidArgs("path is empty".into()));
    }
    let joined = root.join(input);
    let outside = || {
        ToolError::Refused(format!(
            "path {input:?} is outside the session workspace; use paths inside it"
        ))
    };
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    let base = loop {
        match existing.canonicalize() {
            Ok(canonical) => break canonical,
            Err(_) => {
                let name = existing.file_name().ok_or_else(outside)?;
                rest.push(name.to_owned());
                existing = existing.parent().ok_or_else(outside)?;
            }
        }
    };
    if !base.starts_with(root) {
        return Err(outside());
    }
    // Components under a missing ancestor cannot be symlinks, but may be
    // `..` (`missing/../../etc`).
    let tail: PathBuf = rest.iter().rev().collect();
    if tail
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(outside());
    }
    if tail.as_os_str().is_empty() {
        Ok(base)
    } else {
        Ok(base.join(tail))
    }
}

/// The path relative to the workspace root, for messages to the model.
pub fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        let root = root.canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn inside_paths_resolve() {
        let (_d, root) = ws();
        assert_eq!(resolve(&root, "sub/a.txt").unwrap(), root.join("sub/a.txt"));
        assert_eq!(
            resolve(&root, "sub/../sub/a.txt").unwrap(),
            root.join("sub/a.txt")
        );
        assert_eq!(
            resolve(&root, "new/dir/file.txt").unwrap(),
            root.join("new/dir/file.txt")
        );
        let absolute = root.join("sub/a.txt");
        assert_eq!(
            resolve(&root, absolute.to_str().unwrap()).unwrap(),
            absolute
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, root) = ws();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("sub/s.txt")).unwrap();
        for bad in [
            "../secret.txt",
            "sub/../../secret.txt",
            "/etc/passwd",
            "link/secret.txt",
            "sub/s.txt",
            "missing/../../secret.txt",
            "a\0b",
            "",
        ] {
            assert!(resolve(&root, bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn session_dirs_are_distinct_and_safe() {
        let dir = tempfile::tempdir().unwrap();
        let a = session_dir(dir.path(), "chat:dm:42").unwrap();
        let b = session_dir(dir.path(), "chat_dm_42").unwrap();
        assert_ne!(a, b);
        let evil = session_dir(dir.path(), "../../etc").unwrap();
        assert!(evil.starts_with(dir.path().canonicalize().unwrap()));
    }
}
