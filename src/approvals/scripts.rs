//! Running a file the agent wrote or changed in this session — `bash x.sh`,
//! `python3 x.py`, `./x`, `make` with its own Makefile, `sh -c "$(cat x)"` —
//! is judged like download-and-run: a pattern list cannot see what the file
//! does, so a human decides, shown the file's first lines and its hash. An
//! approval is bound to that content: a changed file asks again.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::shell::{Segment, normalize};

/// Lines of a file shown in the prompt.
const SHOWN_LINES: usize = 20;
/// Characters of a file shown in the prompt.
const SHOWN_CHARS: usize = 1500;

/// The key under which such a run is reported (it is never allowlisted: an
/// approval covers one content, see [`AgentFile::sha256`]).
pub const KEY: &str = "run_agent_file";
/// What it means.
pub const DESCRIPTION: &str = "runs a file the agent wrote or changed in this session";

/// A file the command would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFile {
    /// Its path, relative to the workspace where it lies there.
    pub shown_path: String,
    /// The SHA-256 of its content, hex.
    pub sha256: String,
    /// Its first lines (or a note that it is binary).
    pub head: String,
    /// How many lines it has.
    pub lines: usize,
}

/// Programs that run the file named by their first operand.
fn interpreter(program: &str) -> bool {
    matches!(
        program,
        "bash"
            | "sh"
            | "dash"
            | "zsh"
            | "ksh"
            | "mksh"
            | "fish"
            | "perl"
            | "ruby"
            | "node"
            | "nodejs"
            | "deno"
            | "bun"
            | "php"
            | "lua"
            | "Rscript"
            | "tclsh"
            | "source"
            | "."
    ) || program.starts_with("python")
}

/// Most directories a line's names are looked for in (each `cd` on it
/// adds its target under every one so far).
const MAX_DIRS: usize = 16;

/// How far a file's change time may lag the session's clock.
const CLOCK_SLACK_MS: i64 = 2_000;

/// Options of an interpreter that take the next word as their argument.
fn takes_argument(option: &str) -> bool {
    matches!(option, "-o" | "+o" | "-O" | "+O" | "-W" | "-X" | "-I")
}

/// The files `command` would run that lie in `roots` (the workspace and
/// the private temporary directory) and were changed at or after
/// `since_ms` (every one when `None`), resolved from `workspace` and the
/// directories `cd` on the line moves to.
pub fn agent_files(
    command: &str,
    workspace: &Path,
    roots: &[&Path],
    since_ms: Option<i64>,
) -> Vec<AgentFile> {
    use std::os::unix::fs::MetadataExt;
    let normalized = normalize(command);
    // Every directory the line may run a name from: the workspace and each
    // `cd` target on it (a `cd` may fail, or sit in a subshell, so none
    // replaces another); a name is looked for in each.
    let mut dirs = vec![workspace.to_path_buf()];
    let mut named: Vec<String> = Vec::new();
    let mut cats: Vec<String> = Vec::new();
    let mut reads_a_file = false;
    for segment in &normalized.segments {
        let words = &segment.words;
        match words.first().map(String::as_str) {
            Some("cd") => {
                let target = words[1..].iter().find(|w| !w.starts_with('-'));
                if let Some(dir) = target
                    && dirs.len() < MAX_DIRS
                {
                    let from: Vec<PathBuf> = dirs.iter().map(|d| d.join(dir)).collect();
                    dirs.extend(from);
                    dirs.truncate(MAX_DIRS);
                }
                continue;
            }
            // `sh -c "$(cat x)"`, `eval "$(cat x)"`: what `cat` prints may
            // be run.
            Some("cat") => cats.extend(words[1..].iter().filter(|w| !w.starts_with('-')).cloned()),
            _ => {}
        }
        named.extend(run_by(segment, &mut reads_a_file));
    }
    if reads_a_file {
        named.extend(cats);
    }
    let mut found: Vec<AgentFile> = Vec::new();
    let candidates = named
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)));
    for path in candidates {
        let Ok(path) = path.canonicalize() else {
            continue;
        };
        if !roots.iter().any(|root| path.starts_with(root)) || !path.is_file() {
            continue;
        }
        if let Some(since) = since_ms {
            // The change time, which a write or `touch` sets to now and
            // nobody can set back (the modification time can be). The
            // file system's clock runs up to a tick behind the session's:
            // a file changed just before it started counts as changed in it.
            let changed = std::fs::metadata(&path)
                .ok()
                .map(|m| m.ctime() * 1000 + m.ctime_nsec() / 1_000_000);
            if changed.is_some_and(|changed| changed < since - CLOCK_SLACK_MS) {
                continue;
            }
        }
        let Ok(content) = std::fs::read(&path) else {
            continue;
        };
        let shown_path = path
            .strip_prefix(workspace)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string());
        if found.iter().any(|f| f.shown_path == shown_path) {
            continue;
        }
        found.push(describe(shown_path, &content));
    }
    found
}

/// The operands of `segment` it runs as files; sets `reads_a_file` when a
/// shell is handed code read by a command substitution.
fn run_by(segment: &Segment, reads_a_file: &mut bool) -> Vec<String> {
    let words = &segment.words;
    let Some(program) = words.first() else {
        return Vec::new();
    };
    // The program as written, before paths were reduced to names.
    let raw: Vec<&str> = segment.raw.split(' ').collect();
    let written = raw
        .get(raw.len().saturating_sub(words.len()))
        .copied()
        .unwrap_or(program);
    let mut named = Vec::new();
    if written.contains('/') {
        named.push(written.to_string());
    }
    if program == "make" || program == "gmake" {
        named.extend(makefiles(&words[1..]));
        return named;
    }
    if program == "eval" {
        *reads_a_file |= words.iter().any(|w| w.contains("$(") || w.contains('`'));
        return named;
    }
    if !interpreter(program) {
        return named;
    }
    let mut rest = words[1..].iter();
    while let Some(word) = rest.next() {
        match word.as_str() {
            "-c" | "-e" | "-E" | "-m" | "--eval" | "-r" => {
                *reads_a_file |= rest.any(|w| w.contains("$(") || w.contains('`'));
                break;
            }
            "<" => {
                named.extend(rest.next().cloned());
            }
            option if takes_argument(option) => {
                rest.next();
            }
            option if option.starts_with('-') || option.starts_with('+') => {}
            operand => {
                if operand.starts_with("$(") || operand.starts_with("<(") {
                    *reads_a_file = true;
                } else {
                    named.push(operand.to_string());
                }
                break;
            }
        }
    }
    named
}

/// The makefile `make args` reads: `-f FILE`, else the first of GNU make's
/// names in `-C DIR` (default the working directory).
fn makefiles(args: &[String]) -> Vec<String> {
    let mut files = Vec::new();
    let mut dir = String::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == "-f" || word == "--file" || word == "--makefile" {
            files.extend(words.next().cloned());
        } else if let Some(file) = word
            .strip_prefix("--file=")
            .or_else(|| word.strip_prefix("--makefile="))
        {
            files.push(file.to_string());
        } else if word == "-C" || word == "--directory" {
            dir = words.next().cloned().unwrap_or_default();
        } else if let Some(d) = word.strip_prefix("--directory=") {
            dir = d.to_string();
        }
    }
    if files.is_empty() {
        files.extend(
            ["GNUmakefile", "makefile", "Makefile"]
                .iter()
                .map(|name| PathBuf::from(&dir).join(name).display().to_string()),
        );
    }
    files
}

fn describe(shown_path: String, content: &[u8]) -> AgentFile {
    let sha256 = hex::encode(Sha256::digest(content));
    let lines = content.iter().filter(|b| **b == b'\n').count()
        + usize::from(!content.is_empty() && !content.ends_with(b"\n"));
    let head = match std::str::from_utf8(content) {
        Ok(text) if !content.contains(&0) => {
            let head: String = text
                .lines()
                .take(SHOWN_LINES)
                .collect::<Vec<_>>()
                .join("\n");
            crate::render::clip(&head, SHOWN_CHARS)
        }
        _ => format!("(binary, {} bytes)", content.len()),
    };
    AgentFile {
        shown_path,
        sha256,
        head,
        lines,
    }
}

/// The text a human approves: the command, then each file it runs.
pub fn shown(command: &str, files: &[AgentFile]) -> String {
    let mut text = command.to_string();
    for file in files {
        text.push_str(&format!(
            "\n\n# {} ({} lines, sha256 {}):\n{}",
            file.shown_path,
            file.lines,
            &file.sha256[..16],
            file.head
        ));
        if file.lines > SHOWN_LINES {
            text.push_str(&format!("\n# … {} more lines", file.lines - SHOWN_LINES));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws").canonicalize().unwrap_or_else(|_| {
            std::fs::create_dir_all(dir.path().join("ws")).unwrap();
            dir.path().join("ws").canonicalize().unwrap()
        });
        for name in [
            "build.sh",
            "job.py",
            "x",
            "Makefile",
            "sub/Makefile",
            "own.mk",
        ] {
            let path = ws.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("echo {name}\n")).unwrap();
        }
        (dir, ws)
    }

    fn run(ws: &Path, command: &str) -> Vec<String> {
        agent_files(command, ws, &[ws], None)
            .into_iter()
            .map(|f| f.shown_path)
            .collect()
    }

    #[test]
    fn the_ways_of_running_a_written_file_are_seen() {
        let (_d, ws) = workspace();
        for (command, file) in [
            ("bash build.sh", "build.sh"),
            ("sh -x ./build.sh arg", "build.sh"),
            ("sudo bash -o pipefail build.sh", "build.sh"),
            ("python3 -u job.py", "job.py"),
            ("timeout 5 python3 job.py", "job.py"),
            ("./x", "x"),
            ("cd . && ./build.sh", "build.sh"),
            ("make", "Makefile"),
            ("make -C sub test", "sub/Makefile"),
            ("make -f own.mk", "own.mk"),
            ("sh -c \"$(cat build.sh)\"", "build.sh"),
            ("eval \"$(cat job.py)\"", "job.py"),
            (". ./build.sh", "build.sh"),
            ("source build.sh", "build.sh"),
        ] {
            assert_eq!(run(&ws, command), [file], "{command}");
        }
    }

    #[test]
    fn other_commands_and_outside_files_are_not() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("outside.sh"), "echo\n").unwrap();
        for command in [
            "ls -la",
            "cat build.sh",
            "python3 -c 'print(1)'",
            "python3 -m pytest",
            "bash ../outside.sh",
            "bash missing.sh",
            "grep -r x .",
        ] {
            assert!(run(&ws, command).is_empty(), "{command}");
        }
    }

    #[test]
    fn files_older_than_the_session_are_not_counted() {
        let (_d, ws) = workspace();
        let future = crate::store::now_ms() + 60_000;
        assert!(agent_files("bash build.sh", &ws, &[&ws], Some(future)).is_empty());
        assert_eq!(agent_files("bash build.sh", &ws, &[&ws], Some(0)).len(), 1);
    }

    #[test]
    fn the_prompt_shows_the_content_and_its_hash() {
        let (_d, ws) = workspace();
        let files = agent_files("bash build.sh", &ws, &[&ws], None);
        let text = shown("bash build.sh", &files);
        assert!(
            text.starts_with("bash build.sh\n\n# build.sh (1 lines, sha256 "),
            "{text}"
        );
        assert!(text.ends_with("echo build.sh"), "{text}");
    }
}
