//! File tools: `read_file`, `write_file`, `patch`, `search_files`, all
//! confined to the session workspace.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::gitignore::Ignored;
use crate::tools::workspace::{self, display, open_data_beneath, resolve, write_beneath};
use crate::tools::{
    Concurrency, Tool, ToolContext, ToolError, ToolSpec, arg_opt_str, arg_opt_u64, arg_str,
};

/// Largest file the file tools will load.
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Lines returned by one `read_file` call unless asked otherwise.
const DEFAULT_LINES: u64 = 2000;
/// Longest line shown by `read_file` and `search_files`.
const MAX_LINE_CHARS: usize = 2000;

fn failed(err: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(err.to_string())
}

/// Runs `work` on tokio's blocking pool, so the runtime's workers keep
/// serving other sessions while it reads the disk.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work).await.map_err(failed)?
}

/// Runs `work`, the load or write of the file at `path` (at most
/// [`MAX_FILE_BYTES`]). When the runtime has one thread (a command at the
/// terminal, [`crate::runtime::build_terminal`], which serves one person)
/// and `path` is a regular file or none yet, on that thread: the hand-over
/// to the blocking pool and back cost more CPU than a read from the page
/// cache (PERFORMANCE.md, "CPU per turn"). Anything else (a FIFO, a device,
/// which may block until another call feeds it) and every file on the
/// daemon's runtime go to the blocking pool like any other disk work.
async fn one_file<T: Send + 'static>(
    path: PathBuf,
    work: impl FnOnce(PathBuf) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let inline = Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread
        && std::fs::metadata(&path).map_or(true, |meta| meta.is_file());
    if inline {
        return work(path);
    }
    blocking(move || work(path)).await
}

fn load_text(path: &Path, root: &Path) -> Result<String, ToolError> {
    load_text_from(path, root, true)
}

/// [`load_text`], reading a FIFO only when `fifo` (a search reading file
/// after file does not wait on one).
fn load_text_from(path: &Path, root: &Path, fifo: bool) -> Result<String, ToolError> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let shown = |e: std::io::Error| failed(format!("{}: {e}", display(root, path)));
    let file = match open_data_beneath(root, path, fifo) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::IsADirectory => {
            return Err(ToolError::InvalidArgs(format!(
                "{} is a directory; use search_files to list it",
                display(root, path)
            )));
        }
        Err(err) => return Err(shown(err)),
    };
    let meta = file.metadata().map_err(shown)?;
    let bytes = if meta.file_type().is_fifo() {
        workspace::read_fifo(&file, MAX_FILE_BYTES, workspace::FIFO_WAIT).map_err(shown)?
    } else {
        if meta.len() > MAX_FILE_BYTES {
            return Err(failed(format!(
                "{} is {} bytes; the limit is {MAX_FILE_BYTES}",
                display(root, path),
                meta.len()
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(failed)?;
        bytes
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(failed(format!(
            "{} is over {MAX_FILE_BYTES} bytes, the limit",
            display(root, path)
        )));
    }
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return Err(failed(format!("{} looks binary", display(root, path))));
    }
    String::from_utf8(bytes)
        .map_err(|_| failed(format!("{} is not UTF-8 text", display(root, path))))
}

fn clip_line(line: &str) -> String {
    crate::render::clip(line, MAX_LINE_CHARS)
}

/// `read_file`: a range of lines of a text file.
#[derive(Debug, Default)]
pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "read_file",
            "file",
            "Read a text file from the workspace. Lines come numbered; use offset and limit to page through large files.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based). Default 1."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to read. Default 2000."}
                },
                "required": ["path"]
            }),
        )
        .emoji("📖")
        .concurrency(Concurrency::PathScoped { arg: "path" })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.workspace.clone();
        let path = resolve(&root, arg_str(&args, "path")?)?;
        let offset = arg_opt_u64(&args, "offset")?.unwrap_or(1).max(1);
        let limit = arg_opt_u64(&args, "limit")?.unwrap_or(DEFAULT_LINES).max(1);
        one_file(path, move |path| {
            let text = load_text(&path, &root)?;
            let lines: Vec<&str> = text.lines().collect();
            let total = lines.len() as u64;
            let start = offset.min(total.max(1));
            let numbered: Vec<String> = lines
                .iter()
                .enumerate()
                .skip((offset - 1) as usize)
                .take(limit as usize)
                .map(|(i, line)| format!("{:>6}\t{}", i + 1, clip_line(line)))
                .collect();
            let end = start + numbered.len() as u64 - u64::from(!numbered.is_empty());
            Ok(json!({
                "path": display(&root, &path),
                "total_lines": total,
                "start_line": start,
                "end_line": end,
                "more": end < total,
                "content": numbered.join("\n"),
            })
            .to_string())
        })
        .await
    }
}

/// `write_file`: create or replace a file.
#[derive(Debug, Default)]
pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "write_file",
            "file",
            "Create or overwrite a text file in the workspace with the given content. Parent directories are created. To change part of a file, prefer patch.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace."},
                    "content": {"type": "string", "description": "The complete new content."}
                },
                "required": ["path", "content"]
            }),
        )
        .emoji("✍️")
        .concurrency(Concurrency::PathScoped { arg: "path" })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.workspace.clone();
        let path = resolve(&root, arg_str(&args, "path")?)?;
        let content = arg_str(&args, "content")?.to_string();
        one_file(path, move |path| {
            if path.is_dir() {
                return Err(ToolError::InvalidArgs(format!(
                    "{} is a directory",
                    display(&root, &path)
                )));
            }
            let created = !path.exists();
            write_beneath(&root, &path, content.as_bytes()).map_err(failed)?;
            Ok(json!({
                "path": display(&root, &path),
                "bytes_written": content.len(),
                "created": created,
            })
            .to_string())
        })
        .await
    }
}

/// `patch`: replace one exact (or whitespace-tolerant) occurrence.
#[derive(Debug, Default)]
pub struct Patch;

fn squash(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Line ranges of `haystack` whose lines equal `needle`'s lines when runs
/// of whitespace are ignored.
fn fuzzy_matches(haystack: &[&str], needle: &[String]) -> Vec<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return Vec::new();
    }
    (0..=haystack.len() - needle.len())
        .filter(|&start| {
            needle
                .iter()
                .enumerate()
                .all(|(i, n)| squash(haystack[start + i]) == *n)
        })
        .collect()
}

/// Applies the edit; returns the new text, the number of replacements and
/// whether whitespace-tolerant matching was needed.
pub fn apply_patch(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize, bool), ToolError> {
    if old.is_empty() {
        return Err(ToolError::InvalidArgs(
            "old_string must not be empty".into(),
        ));
    }
    let exact = text.matches(old).count();
    if exact == 1 || (exact > 1 && replace_all) {
        return Ok((text.replace(old, new), exact, false));
    }
    if exact > 1 {
        return Err(ToolError::InvalidArgs(format!(
            "old_string occurs {exact} times; include more surrounding lines to make it unique, or set replace_all"
        )));
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let needle: Vec<String> = old.trim_matches('\n').split('\n').map(squash).collect();
    let starts = fuzzy_matches(&lines, &needle);
    match starts.as_slice() {
        [] => Err(ToolError::InvalidArgs(
            "old_string was not found (not even ignoring whitespace); read the file and copy the exact text".into(),
        )),
        [start] => {
            let mut out: Vec<&str> = lines[..*start].to_vec();
            let replacement = new.trim_end_matches('\n');
            out.extend(replacement.split('\n'));
            out.extend(&lines[start + needle.len()..]);
            Ok((out.join("\n"), 1, true))
        }
        many if replace_all => {
            let mut out: Vec<&str> = Vec::new();
            let mut i = 0;
            for start in many {
                if *start < i {
                    continue;
                }
                out.extend(&lines[i..*start]);
                out.extend(new.trim_end_matches('\n').split('\n'));
                i = start + needle.len();
            }
            out.extend(&lines[i..]);
            Ok((out.join("\n"), many.len(), true))
        }
        many => Err(ToolError::InvalidArgs(format!(
            "old_string matches {} places when whitespace is ignored; include more context",
            many.len()
        ))),
    }
}

#[async_trait]
impl Tool for Patch {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "patch",
            "file",
            "Edit a file by replacing old_string with new_string. old_string must match exactly one place (whitespace differences are tolerated when there is no exact match); set replace_all to change every occurrence.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace."},
                    "old_string": {"type": "string", "description": "Text to replace, with enough context to be unique."},
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence. Default false."}
                },
                "required": ["path", "old_string", "new_string"]
            }),
        )
        .emoji("🩹")
        .concurrency(Concurrency::PathScoped { arg: "path" })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.workspace.clone();
        let path = resolve(&root, arg_str(&args, "path")?)?;
        let old = arg_str(&args, "old_string")?.to_string();
        let new = arg_str(&args, "new_string")?.to_string();
        let replace_all = args
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        one_file(path, move |path| {
            let text = load_text(&path, &root)?;
            let (patched, count, fuzzy) = apply_patch(&text, &old, &new, replace_all)?;
            write_beneath(&root, &path, patched.as_bytes()).map_err(failed)?;
            Ok(json!({
                "path": display(&root, &path),
                "replacements": count,
                "whitespace_tolerant": fuzzy,
            })
            .to_string())
        })
        .await
    }
}

/// `search_files`: regex search in contents, or glob search on names;
/// `.gitignore` is respected.
#[derive(Debug, Default)]
pub struct SearchFiles;

/// The entries under `dir`, in the workspace at `root`, that its
/// `.gitignore` files leave (read by [`Ignored`], not by the walker), `.git`
/// left out; symlinks are not followed.
fn walker(root: &Path, dir: &Path) -> ignore::Walk {
    let ignored = Ignored::new(root);
    ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .filter_entry(move |e| {
            let dir = e.file_type().is_some_and(|t| t.is_dir());
            e.file_name() != ".git" && !ignored.ignored(e.path(), dir)
        })
        .build()
}

fn search(
    root: &Path,
    dir: &Path,
    pattern: &str,
    target: &str,
    glob: Option<&str>,
    case_insensitive: bool,
    max: usize,
) -> Result<Value, ToolError> {
    let filter = glob
        .map(|g| {
            globset::GlobBuilder::new(g)
                .literal_separator(false)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| ToolError::InvalidArgs(format!("bad glob {g:?}: {e}")))
        })
        .transpose()?;
    let rel = |p: &Path| display(root, p);
    let name_ok = |p: &Path| {
        filter.as_ref().is_none_or(|m| {
            m.is_match(p.strip_prefix(dir).unwrap_or(p))
                || p.file_name().is_some_and(|n| m.is_match(n))
        })
    };
    let mut results = Vec::new();
    let mut truncated = false;
    if target == "files" {
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(false)
            .case_insensitive(case_insensitive)
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("bad glob {pattern:?}: {e}")))?
            .compile_matcher();
        for entry in walker(root, dir).flatten() {
            let path = entry.path();
            let rel_to_dir = path.strip_prefix(dir).unwrap_or(path);
            if path == dir
                || !(matcher.is_match(rel_to_dir)
                    || path.file_name().is_some_and(|n| matcher.is_match(n)))
            {
                continue;
            }
            if results.len() == max {
                truncated = true;
                break;
            }
            results.push(json!(rel(path)));
        }
    } else {
        let regex = regex::RegexBuilder::new(pattern)
            .case_insensitive(case_insensitive)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("bad regex: {e}")))?;
        'files: for entry in walker(root, dir).flatten() {
            let path = entry.path();
            if !entry.file_type().is_some_and(|t| t.is_file()) || !name_ok(path) {
                continue;
            }
            let Ok(text) = load_text_from(path, root, false) else {
                continue;
            };
            for (i, line) in text.lines().enumerate() {
                if regex.is_match(line) {
                    if results.len() == max {
                        truncated = true;
                        break 'files;
                    }
                    results.push(json!({"path": rel(path), "line": i + 1, "text": clip_line(line.trim_end())}));
                }
            }
        }
    }
    Ok(json!({"matches": results, "count": results.len(), "truncated": truncated}))
}

#[async_trait]
impl Tool for SearchFiles {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "search_files",
            "file",
            "Search the workspace. target \"content\" (default) finds lines matching a regex; target \"files\" finds files whose names match a glob such as \"*.rs\". Files ignored by .gitignore are skipped.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regex (content) or glob (files)."},
                    "target": {"type": "string", "enum": ["content", "files"], "description": "What to search. Default content."},
                    "path": {"type": "string", "description": "Directory to search, relative to the workspace. Default the whole workspace."},
                    "glob": {"type": "string", "description": "Only search files whose names match this glob (content search)."},
                    "case_insensitive": {"type": "boolean", "description": "Ignore case. Default false."},
                    "max_results": {"type": "integer", "minimum": 1, "description": "Most results to return. Default 100."}
                },
                "required": ["pattern"]
            }),
        )
        .emoji("🔎")
        .concurrency(Concurrency::ReadOnly)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.workspace.clone();
        let dir: PathBuf = resolve(&root, arg_opt_str(&args, "path").unwrap_or("."))?;
        let pattern = arg_str(&args, "pattern")?.to_string();
        let target = arg_opt_str(&args, "target")
            .unwrap_or("content")
            .to_string();
        if !matches!(target.as_str(), "content" | "files") {
            return Err(ToolError::InvalidArgs(
                "target must be \"content\" or \"files\"".into(),
            ));
        }
        let glob = arg_opt_str(&args, "glob").map(str::to_string);
        let case_insensitive = args
            .get("case_insensitive")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let max = arg_opt_u64(&args, "max_results")?
            .unwrap_or(100)
            .clamp(1, 1000) as usize;
        blocking(move || {
            search(
                &root,
                &dir,
                &pattern,
                &target,
                glob.as_deref(),
                case_insensitive,
                max,
            )
            .map(|v| v.to_string())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::apply_patch;

    #[test]
    fn exact_patch_replaces_once() {
        let (out, n, fuzzy) = apply_patch("a\nb\nc\n", "b", "B", false).unwrap();
        assert_eq!((out.as_str(), n, fuzzy), ("a\nB\nc\n", 1, false));
    }

    #[test]
    fn ambiguous_patch_is_refused_unless_replace_all() {
        assert!(apply_patch("x x", "x", "y", false).is_err());
        assert_eq!(apply_patch("x x", "x", "y", true).unwrap().0, "y y");
    }

    #[test]
    fn whitespace_tolerant_patch() {
        let text = "fn main() {\n    let  a =  1;\n    println!(\"{a}\");\n}\n";
        let (out, n, fuzzy) = apply_patch(
            text,
            "let a = 1;\nprintln!(\"{a}\");",
            "    let a = 2;",
            false,
        )
        .unwrap();
        assert!(fuzzy);
        assert_eq!(n, 1);
        assert_eq!(out, "fn main() {\n    let a = 2;\n}\n");
        assert!(apply_patch(text, "let b = 1;", "x", false).is_err());
    }
}
