//! What one command runs as files: its program by path, an
//! interpreter's script, `make`'s makefile, awk's and sed's program files,
//! and whether it reads its program from standard input or a descriptor.

use std::path::{Path, PathBuf};

use super::super::shell::{Segment, is_shell};
use super::{interpreter, takes_argument};

/// The operands of `segment` it runs as files; sets `reads_a_file` when a
/// shell is handed code read by a command substitution, and `from_input`
/// when a shell or interpreter reads its program from standard input or a
/// descriptor (`bash`, `bash -s`, `sh /dev/stdin`, `python3 -`).
pub(super) fn run_by(
    segment: &Segment,
    reads_a_file: &mut bool,
    from_input: &mut bool,
) -> Vec<String> {
    let words = &segment.words;
    let Some(program) = words.first() else {
        return Vec::new();
    };
    let mut named = Vec::new();
    if segment.program.contains('/') {
        named.push(segment.program.clone());
    }
    // `at -f FILE`: a shell runs the file's commands.
    if program == "at" || program == "batch" {
        let mut rest = words[1..].iter();
        while let Some(word) = rest.next() {
            if word == "-f" {
                named.extend(rest.next().cloned());
            }
        }
        *from_input = true;
        return named;
    }
    if program == "make" || program == "gmake" {
        named.extend(makefiles(&words[1..]));
        return named;
    }
    if program == "eval" {
        *reads_a_file |= words.iter().any(|w| w.contains("$(") || w.contains('`'));
        return named;
    }
    // awk's and sed's programs can run commands (`system()`, GNU sed's `e`):
    // `-f FILE`, `-fFILE`, `-nf FILE`, gawk's `-i`/`-E` too.
    if matches!(
        program.as_str(),
        "awk" | "gawk" | "mawk" | "nawk" | "sed" | "gsed"
    ) {
        let mut rest = words[1..].iter();
        while let Some(word) = rest.next() {
            if let Some(long) = word.strip_prefix("--") {
                match long.split_once('=') {
                    Some(("file" | "include" | "exec", file)) => named.push(file.to_string()),
                    None if matches!(long, "file" | "include" | "exec") => {
                        named.extend(rest.next().cloned());
                    }
                    _ => {}
                }
                continue;
            }
            let Some(flags) = word.strip_prefix('-') else {
                continue;
            };
            // `-v x=1`, `-F:`, `-e script`: their argument is no file.
            if let Some(at) = flags.find(['v', 'F', 'e']) {
                if at + 1 == flags.len() {
                    rest.next();
                }
                continue;
            }
            // (`-i` and `-E` are gawk's; sed's edit in place and extend
            // its expressions.)
            let file_flags: &[char] = if program.ends_with("sed") {
                &['f']
            } else {
                &['f', 'i', 'E']
            };
            if let Some(at) = flags.find(file_flags) {
                match &flags[at + 1..] {
                    "" => named.extend(rest.next().cloned()),
                    file => named.push(file.to_string()),
                }
            }
        }
        return named;
    }
    if !interpreter(program) {
        return named;
    }
    // Till an operand or inline code says otherwise, the program is read
    // from standard input.
    let mut input = true;
    let mut rest = words[1..].iter();
    while let Some(word) = rest.next() {
        match word.as_str() {
            // `python3 -m pkg.mod` (`-mpkg`, `-um pkg`): the module's file,
            // or its package's `__main__`, and each package's `__init__`.
            flags
                if program.starts_with("python")
                    && !flags.starts_with("--")
                    && flags.strip_prefix('-').is_some_and(|f| {
                        f.split('m').next().is_some_and(|before| {
                            f.contains('m') && before.chars().all(|c| "bBdEhiIOPqsSuvx".contains(c))
                        })
                    }) =>
            {
                let attached = flags.split_once('m').map_or("", |(_, after)| after);
                let module = match attached {
                    "" => rest.next().cloned(),
                    module => Some(module.to_string()),
                };
                if let Some(module) = module {
                    let path = module.replace('.', "/");
                    named.push(format!("{path}.py"));
                    named.push(format!("{path}/__main__.py"));
                    let parts: Vec<&str> = path.split('/').collect();
                    for end in 1..=parts.len() {
                        named.push(format!("{}/__init__.py", parts[..end].join("/")));
                    }
                }
                input = false;
                break;
            }
            "-c" | "-e" | "-E" | "-m" | "--eval" | "-r" => {
                *reads_a_file |= rest.any(|w| w.contains("$(") || w.contains('`'));
                input = false;
                break;
            }
            option if takes_argument(option) => {
                rest.next();
            }
            // A shell's `-s`: the program is standard input, whatever
            // operands follow.
            option if option.starts_with('-') && !option.starts_with("--") => {
                if option.contains('s') && is_shell(program) {
                    *from_input = true;
                }
            }
            option if option.starts_with('-') || option.starts_with('+') => {}
            operand => {
                if operand.starts_with("$(") || operand.starts_with("<(") {
                    *reads_a_file = true;
                    input = false;
                } else if !descriptor(operand) {
                    named.push(operand.to_string());
                    input = false;
                }
                break;
            }
        }
    }
    *from_input |= input;
    named
}

/// Whether `path` names what a descriptor is (`/dev/stdin`, `/dev/fd/3`,
/// `/proc/self/fd/0`, `/proc/thread-self/fd/0`, `/dev//stdin`, `-`): a
/// program given it reads what the line redirects. Anything under `/dev`
/// or `/proc` is taken as one: no script lives there.
fn descriptor(path: &str) -> bool {
    path == "-" || path.starts_with("/dev/") || path.starts_with("/proc/")
}

/// Whether `path` is a symbolic link that leads (in a few steps) to a
/// descriptor's path (`ln -s /dev/stdin s; bash s < x.sh`).
pub(super) fn links_to_a_descriptor(path: &Path) -> bool {
    let mut path = path.to_path_buf();
    for _ in 0..8 {
        let Ok(target) = std::fs::read_link(&path) else {
            return false;
        };
        let target = path
            .parent()
            .map_or(target.clone(), |dir| dir.join(&target));
        if descriptor(&target.to_string_lossy()) {
            return true;
        }
        path = target;
    }
    false
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
