//! What the words of one simple command mean: `$HOME` folded to `~`,
//! wrappers peeled off (`sudo`, `env`, `timeout`, `flock`, `xargs`,
//! `parallel`…), absolute program paths reduced to names, GNU long options
//! given by a prefix spelled out (`--rec` → `--recursive`), and the scripts
//! a command runs (`sh -c`, `eval`, `find -exec`, `env -S`, here-strings).

use super::lex::{is_assignment, is_keyword};

/// Drops what only shapes the script around a command from the front of
/// its words: keywords, `case … in` and arm patterns, `function name`,
/// `for x in …` lists (the bodies of functions are analysed as commands of
/// their own). True when something was dropped.
pub(super) fn unshape(words: &mut Vec<String>) -> bool {
    let before = words.len();
    while let Some(first) = words.first() {
        if is_keyword(first) {
            let time = first == "time";
            words.remove(0);
            // `time -p command`: the keyword's one option.
            if time && words.first().is_some_and(|w| w == "-p") {
                words.remove(0);
            }
        } else if first == "case" {
            match words.iter().position(|w| w.ends_with(')')) {
                Some(arm) => drop(words.drain(..=arm)),
                None => words.clear(),
            }
        } else if first.ends_with(')') && !first.contains('(') && !first.contains('=') {
            // The next arm of a case: `pattern) command`.
            words.remove(0);
        } else if first == "function" {
            words.drain(..words.len().min(2));
        } else if first == "for" || first == "select" {
            words.clear();
        } else {
            break;
        }
    }
    words.len() != before
}

pub(super) fn fold_home(word: &str) -> String {
    for home in ["${HOME}", "$HOME"] {
        if let Some(rest) = word.strip_prefix(home)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("~{rest}");
        }
    }
    if let Some(rest) = word.strip_prefix("/home/") {
        let tail = rest.split_once('/').map_or("", |(_, t)| t);
        return if tail.is_empty() {
            "~".into()
        } else {
            format!("~/{tail}")
        };
    }
    if let Some(rest) = word.strip_prefix("/root")
        && (rest.is_empty() || rest.starts_with('/'))
    {
        return format!("~{rest}");
    }
    word.to_string()
}

/// The program name of a word: `/usr/bin/rm` → `rm` (a command
/// substitution stays whole: its slashes are its own).
pub(super) fn program(word: &str) -> &str {
    if word.contains("$(") || word.contains('`') {
        return word;
    }
    word.rsplit('/').next().unwrap_or(word)
}

/// Options of wrappers that take a value.
fn takes_value(wrapper: &str, option: &str) -> bool {
    match wrapper {
        "sudo" | "doas" => matches!(
            option,
            "-u" | "-g"
                | "-C"
                | "-h"
                | "-p"
                | "-U"
                | "-r"
                | "-t"
                | "-D"
                | "-T"
                | "--user"
                | "--group"
                | "--prompt"
                | "--host"
                | "--role"
                | "--type"
                | "--other-user"
                | "--chdir"
                | "--command-timeout"
                | "--close-from"
        ),
        "env" => matches!(option, "-u" | "--unset" | "-C" | "--chdir"),
        "nice" => matches!(option, "-n" | "--adjustment"),
        "ionice" => matches!(option, "-c" | "-n" | "-p" | "--class" | "--classdata"),
        "timeout" => matches!(option, "-s" | "-k" | "--signal" | "--kill-after"),
        "xargs" => matches!(
            option,
            "-n" | "-I"
                | "-P"
                | "-d"
                | "-L"
                | "-a"
                | "-s"
                | "-E"
                | "--max-args"
                | "--max-procs"
                | "--delimiter"
                | "--arg-file"
        ),
        "watch" => matches!(option, "-n" | "--interval" | "-q" | "--equexit"),
        "stdbuf" => matches!(
            option,
            "-i" | "-o" | "-e" | "--input" | "--output" | "--error"
        ),
        "time" => matches!(option, "-o" | "-f" | "--output" | "--format"),
        "strace" | "ltrace" => matches!(option, "-o" | "-e" | "-p" | "-s" | "-u" | "-E"),
        "systemd-run" => matches!(
            option,
            "-p" | "--property" | "-u" | "--unit" | "-E" | "--setenv" | "-M" | "--machine"
        ),
        "nsenter" => matches!(option, "-t" | "--target" | "-S" | "-G" | "-r" | "-w"),
        "unshare" => matches!(option, "-S" | "--setuid" | "-G" | "--setgid" | "-R" | "-w"),
        "pkexec" => option == "--user",
        "sshpass" => matches!(option, "-p" | "-f" | "-d"),
        "cpulimit" => matches!(option, "-l" | "--limit" | "-p" | "--pid"),
        "xvfb-run" => matches!(option, "-n" | "-s" | "-f" | "-e" | "--server-args"),
        "proxychains" | "proxychains4" => option == "-f",
        "fakeroot" => matches!(option, "-s" | "-i"),
        "caffeinate" => matches!(option, "-t" | "-w"),
        "exec" => option == "-a",
        "flock" => matches!(option, "-w" | "--timeout" | "-E" | "--conflict-exit-code"),
        "parallel" => matches!(
            option,
            "-j" | "--jobs"
                | "-S"
                | "--sshlogin"
                | "--joblog"
                | "-N"
                | "-n"
                | "--max-args"
                | "--timeout"
                | "--delay"
                | "--retries"
                | "--halt"
                | "-a"
                | "--arg-file"
        ),
        "runuser" | "su" => matches!(option, "-u" | "-g" | "-G" | "--user" | "--group"),
        "run0" => matches!(
            option,
            "-u" | "--user"
                | "-g"
                | "--group"
                | "-D"
                | "--chdir"
                | "--setenv"
                | "--unit"
                | "--property"
                | "--nice"
                | "--machine"
        ),
        "prlimit" => matches!(option, "-p" | "--pid" | "-o" | "--output"),
        "setpriv" => matches!(
            option,
            "--reuid"
                | "--regid"
                | "--ruid"
                | "--euid"
                | "--rgid"
                | "--egid"
                | "--groups"
                | "--inh-caps"
                | "--ambient-caps"
                | "--bounding-set"
                | "--securebits"
                | "--pdeathsig"
                | "--selinux-label"
                | "--apparmor-profile"
                | "--landlock-access"
                | "--landlock-rule"
        ),
        "ssh-agent" => matches!(option, "-a" | "-E" | "-t" | "-O" | "-P"),
        "systemd-inhibit" => matches!(option, "--what" | "--who" | "--why" | "--mode"),
        "screen" => matches!(option, "-S" | "-c" | "-e" | "-h" | "-p" | "-T" | "-s"),
        "numactl" => matches!(
            option,
            "-N" | "-m"
                | "-C"
                | "-i"
                | "-p"
                | "-P"
                | "--cpunodebind"
                | "--membind"
                | "--physcpubind"
                | "--interleave"
                | "--preferred"
        ),
        "lxc-attach" => matches!(
            option,
            "-n" | "--name" | "-P" | "--lxcpath" | "-s" | "-u" | "-g" | "-v"
        ),
        "flatpak-spawn" => matches!(option, "--env" | "--directory" | "--forward-fd"),
        _ => false,
    }
}

/// Programs that run the command given after their own options.
fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "command"
            | "builtin"
            | "exec"
            | "nohup"
            | "time"
            | "sudo"
            | "doas"
            | "nice"
            | "ionice"
            | "timeout"
            | "xargs"
            | "stdbuf"
            | "watch"
            | "busybox"
            | "chrt"
            | "taskset"
            | "unbuffer"
            | "setsid"
            | "flock"
            | "parallel"
            | "caffeinate"
            | "chronic"
            | "torsocks"
            | "proxychains"
            | "proxychains4"
            | "firejail"
            | "fakeroot"
            | "runuser"
            | "chroot"
            | "unshare"
            | "nsenter"
            | "pkexec"
            | "systemd-run"
            | "strace"
            | "ltrace"
            | "valgrind"
            | "eatmydata"
            | "faketime"
            | "cpulimit"
            | "rlwrap"
            | "xvfb-run"
            | "dbus-run-session"
            | "sshpass"
            | "run0"
            | "prlimit"
            | "setpriv"
            | "setarch"
            | "linux32"
            | "linux64"
            | "i386"
            | "x86_64"
            | "ssh-agent"
            | "systemd-inhibit"
            | "screen"
            | "ifne"
            | "numactl"
            | "catchsegv"
            | "dbus-launch"
            | "flatpak-spawn"
            | "lxc-attach"
            | "sg"
    )
}

/// Removes wrappers and assignments from the front of a simple command
/// (its words, redirections apart); the program stays as written.
pub(super) fn peel(mut words: Vec<String>) -> Vec<String> {
    // Variables set for the command (git reads configuration from some).
    let mut assigned: Vec<String> = Vec::new();
    loop {
        let Some(first) = words.first().cloned() else {
            return words;
        };
        if is_assignment(&first) {
            assigned.push(words.remove(0));
            continue;
        }
        if unshape(&mut words) {
            // Script structure behind a wrapper: what it holds still counts.
            continue;
        }
        let name = program(&first).to_string();
        if !is_wrapper(&name) {
            if name == "git" {
                words.splice(1..1, super::git::environment(&assigned));
            }
            return words;
        }
        words.remove(0);
        while let Some(next) = words.first().cloned() {
            if next == "--" {
                words.remove(0);
                break;
            }
            if name == "env"
                && let Some(split) = split_string(&mut words)
            {
                // `env -S 'cmd args'`: the string is the command's words.
                words.splice(0..0, split);
                break;
            }
            // `flock FILE -c SCRIPT`, `runuser -c SCRIPT`: a shell's script.
            if matches!(name.as_str(), "flock" | "runuser")
                && matches!(next.as_str(), "-c" | "--command")
            {
                words[0] = "-c".into();
                words.insert(0, "sh".into());
                break;
            }
            let is_option = next.starts_with('-') && next.len() > 1;
            let numeric = matches!(name.as_str(), "chrt" | "taskset")
                && next
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ',' | '-' | 'x'));
            if is_option {
                words.remove(0);
                if takes_value(&name, &next) && !words.is_empty() {
                    words.remove(0);
                }
            } else if name == "env" && is_assignment(&next) {
                assigned.push(words.remove(0));
            } else if numeric {
                words.remove(0);
            } else {
                break;
            }
        }
        match name.as_str() {
            "timeout"
                if words.first().is_some_and(|w| {
                    w.starts_with(|c: char| c.is_ascii_digit()) || w == "infinity"
                }) =>
            {
                words.remove(0);
            }
            // `chroot NEWROOT command…`, `faketime TIME command…`,
            // `setarch ARCH command…`.
            "chroot" | "faketime" | "setarch" if words.len() > 1 => {
                words.remove(0);
                if name == "setarch" {
                    while words
                        .first()
                        .is_some_and(|w| w.starts_with('-') && w.len() > 1)
                    {
                        words.remove(0);
                    }
                }
            }
            // `sg GROUP [-c] COMMAND`: a shell runs the command.
            "sg" if words.len() > 1 => {
                words.remove(0);
                if words.first().is_some_and(|w| w == "-c") {
                    words.remove(0);
                }
                let script = words.join(" ");
                words = vec!["sh".into(), "-c".into(), script];
            }
            // `flock FILE command…` (`flock FD` runs nothing), `flock FILE
            // -c SCRIPT`: a shell's script.
            "flock" if words.len() > 1 => {
                words.remove(0);
                if words.first().is_some_and(|w| w == "-c" || w == "--command") {
                    words[0] = "-c".into();
                    words.insert(0, "sh".into());
                }
            }
            // `parallel command ::: arguments…`: each argument is a run.
            "parallel" => {
                if let Some(at) = words.iter().position(|w| w.starts_with(":::")) {
                    let arguments: Vec<String> = words.drain(at..).skip(1).collect();
                    if let Some(first) = arguments.into_iter().find(|a| !a.starts_with(":::")) {
                        words.push(first);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Long options of commands whose dangerous options are matched by name,
/// dangerous ones first: a unique prefix (what getopt accepts) or an
/// ambiguous one (failing closed) is read as the first it begins.
fn long_options(command: &[String]) -> &'static [&'static str] {
    let Some(name) = command.first() else {
        return &[];
    };
    match name.as_str() {
        "rm" => &[
            "--recursive",
            "--force",
            "--no-preserve-root",
            "--preserve-root",
            "--one-file-system",
            "--interactive",
            "--dir",
            "--verbose",
        ],
        "chmod" | "chown" | "chgrp" => &[
            "--recursive",
            "--no-preserve-root",
            "--preserve-root",
            "--reference",
            "--changes",
            "--silent",
            "--quiet",
            "--verbose",
            "--dereference",
            "--no-dereference",
            "--from",
        ],
        "pkill" | "killall" | "kill" => &["--signal"],
        "git" => match super::git::subcommand(command) {
            Some("push") => &[
                "--force",
                "--force-with-lease",
                "--mirror",
                "--delete",
                "--prune",
                "--force-if-includes",
                "--follow-tags",
            ],
            Some("reset") => &["--hard", "--keep", "--merge", "--mixed", "--soft"],
            Some("clean") => &["--force", "--dry-run", "--quiet"],
            Some("branch") => &["--delete", "--force"],
            _ => &[],
        },
        _ => &[],
    }
}

/// `command` with its long options spelled out in full.
pub(super) fn spell_out(mut command: Vec<String>) -> Vec<String> {
    let known = long_options(&command);
    if known.is_empty() {
        return command;
    }
    for word in command.iter_mut().skip(1) {
        if !word.starts_with("--") || word.len() < 3 {
            continue;
        }
        let (option, value) = match word.split_once('=') {
            Some((o, v)) => (o.to_string(), Some(v.to_string())),
            None => (word.clone(), None),
        };
        if known.contains(&option.as_str()) {
            continue;
        }
        if let Some(full) = known.iter().find(|k| k.starts_with(&option)) {
            *word = match value {
                Some(v) => format!("{full}={v}"),
                None => (*full).to_string(),
            };
        }
    }
    command
}

const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh", "yash", "csh", "tcsh", "ksh93",
];

/// Whether `name` is a shell.
pub fn is_shell(name: &str) -> bool {
    SHELLS.contains(&name)
}

/// The scripts `words` (a peeled command) runs or defines: `sh -c
/// SCRIPT`, `su -c SCRIPT`, `eval …`, what a here-document or here-string
/// (`fed`) gives a shell, `find … -exec CMD ;`, an alias's body.
pub(super) fn inline_scripts(words: &[String], fed: &[String]) -> Vec<String> {
    let Some(name) = words.first().map(String::as_str) else {
        return Vec::new();
    };
    let mut scripts = super::valued::scripts(words);
    for script in own_scripts(name, words, fed) {
        // Found twice (`su -c` by its option and by its syntax): once.
        if !scripts.contains(&script) {
            scripts.push(script);
        }
    }
    scripts
}

/// The scripts of [`inline_scripts`] that `name`'s own syntax holds.
fn own_scripts(name: &str, words: &[String], fed: &[String]) -> Vec<String> {
    match name {
        "eval" => vec![words[1..].join(" ")],
        // A command run elsewhere is still a command.
        "ssh" => remote_command(words).into_iter().collect(),
        "docker" | "podman" | "kubectl" | "oc" if words.get(1).is_some_and(|w| w == "exec") => {
            exec_command(&words[2..]).into_iter().collect()
        }
        "alias" => words[1..]
            .iter()
            .filter_map(|d| d.split_once('=').map(|(_, body)| body.to_string()))
            .collect(),
        "find" => find_exec(words),
        // `at` and `batch` run what they read as a shell's commands.
        "at" | "batch" => fed.to_vec(),
        "git" => super::git::scripts(words),
        _ if is_shell(name) || name == "su" => {
            let mut scripts = Vec::new();
            if let Some(at) = words
                .iter()
                .position(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'))
            {
                // `-c SCRIPT`, `-xc SCRIPT`, or attached: `-cSCRIPT`.
                let (_, attached) = words[at].split_once('c').unwrap_or_default();
                let script = if attached.is_empty() {
                    words[at + 1..].iter().find(|w| *w != "--").cloned()
                } else {
                    Some(attached.to_string())
                };
                scripts.extend(script);
            }
            scripts.extend(fed.iter().cloned());
            scripts
        }
        _ => Vec::new(),
    }
}

/// `words` as a command line whose words are those words.
fn quoted(words: &[String]) -> String {
    words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

/// `word` in single quotes.
pub(super) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `words` as ssh sends them: joined by spaces, for the remote shell to
/// split again.
fn joined(words: &[String]) -> String {
    words.join(" ")
}

/// What follows the first operand of `words` (a target: ssh's host,
/// exec's container) after options, of which those `takes_value` says
/// are followed by their value, and after the options and `--` right
/// after the target: the command run there, as `line` makes it of its
/// words.
fn after_target(
    words: &[String],
    line: fn(&[String]) -> String,
    takes_value: impl Fn(&str) -> bool,
) -> Option<String> {
    let mut at = 0;
    let mut target = false;
    while let Some(word) = words.get(at) {
        if word == "--" {
            at += 1;
            if target {
                break;
            }
            continue;
        }
        if word.starts_with('-') {
            at += if takes_value(word) { 2 } else { 1 };
            continue;
        }
        if target {
            break;
        }
        target = true;
        at += 1;
    }
    let command = words.get(at..).unwrap_or_default();
    if !target || command.is_empty() {
        return None;
    }
    Some(line(command))
}

/// The command `ssh [options] host command…` runs on the host.
fn remote_command(words: &[String]) -> Option<String> {
    // Options that take a value (`-p 22`, `-i key`, `-o Opt=v`…).
    after_target(&words[1..], joined, |option| {
        super::valued::takes_next(option, "BbcDEeFIiJLlmOoPpQRSWw")
    })
}

/// The command of `docker exec [options] container command…` (and
/// podman's, kubectl's `exec pod -- command…`).
fn exec_command(words: &[String]) -> Option<String> {
    after_target(words, quoted, |option| {
        matches!(
            option,
            "-u" | "--user"
                | "-w"
                | "--workdir"
                | "-e"
                | "--env"
                | "--env-file"
                | "-c"
                | "--container"
                | "-n"
                | "--namespace"
        )
    })
}

/// The commands of `find`'s `-exec`/`-execdir`/`-ok`/`-okdir` actions,
/// with `{}` standing for what is found under the first starting point
/// (`find /etc -exec cp x {} ;` writes `/etc/*`).
fn find_exec(words: &[String]) -> Vec<String> {
    let start = words
        .iter()
        .skip(1)
        .find(|w| !w.starts_with('-') && !matches!(w.as_str(), "(" | "!"))
        .map_or(".", String::as_str);
    let found = format!("{}/*", start.trim_end_matches('/'));
    let mut scripts = Vec::new();
    let mut rest = words.iter().skip(1);
    while let Some(word) = rest.next() {
        if matches!(word.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            // Each word as it was, `{}` as the glob of what is found.
            let command: Vec<String> = rest
                .by_ref()
                .take_while(|w| !matches!(w.as_str(), ";" | "+" | "\\;"))
                .map(|w| quote(&w.replace("{}", &found)))
                .collect();
            scripts.push(command.join(" "));
        }
    }
    scripts
}

/// `env`'s `-S STRING` / `-SSTRING` / `--split-string=STRING` at the
/// front of `words`, taken off: the string's words.
fn split_string(words: &mut Vec<String>) -> Option<Vec<String>> {
    let first = words.first()?;
    let inline = first
        .strip_prefix("--split-string=")
        .or_else(|| first.strip_prefix("-S").filter(|s| !s.is_empty()))
        .map(str::to_string);
    let string = match inline {
        Some(string) => {
            words.remove(0);
            string
        }
        // (A `-S` with nothing after it is left for the option loop.)
        None if (first == "-S" || first == "--split-string") && words.len() > 1 => {
            words.remove(0);
            words.remove(0)
        }
        None => return None,
    };
    Some(string.split_whitespace().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn long_options_are_spelled_out() {
        assert_eq!(
            spell_out(words("rm --rec --forc --no-pres /")).join(" "),
            "rm --recursive --force --no-preserve-root /"
        );
        assert_eq!(
            spell_out(words("git -C repo push --forc origin main")).join(" "),
            "git -C repo push --force origin main"
        );
        assert_eq!(
            spell_out(words("git reset --ha HEAD~1")).join(" "),
            "git reset --hard HEAD~1"
        );
        assert_eq!(
            spell_out(words("ls --recursive")).join(" "),
            "ls --recursive"
        );
    }

    #[test]
    fn new_wrappers_are_peeled() {
        assert_eq!(
            peel(words("flock -w 5 /tmp/l rm -rf x")).join(" "),
            "rm -rf x"
        );
        assert_eq!(peel(words("parallel rm -rf ::: /")).join(" "), "rm -rf /");
        assert_eq!(
            peel(words("sudo -u root runuser -u app -- rm x")).join(" "),
            "rm x"
        );
    }

    #[test]
    fn scripts_inside_commands_are_found() {
        assert_eq!(inline_scripts(&words("bash -c -- x"), &[]), ["x"]);
        assert_eq!(inline_scripts(&words("alias ll=rm"), &[]), ["rm"]);
        assert_eq!(
            inline_scripts(&words("ssh -p 2222 -i key deploy@host rm -rf /srv"), &[]),
            ["rm -rf /srv"]
        );
        assert_eq!(
            inline_scripts(&words("docker exec -it -u root web rm -rf /data"), &[]),
            ["'rm' '-rf' '/data'"]
        );
        assert_eq!(
            inline_scripts(&words("kubectl exec -n prod api -- rm -rf /data"), &[]),
            ["'rm' '-rf' '/data'"]
        );
        assert_eq!(
            inline_scripts(&words("ssh -t host -- rm -rf /srv"), &[]),
            ["rm -rf /srv"]
        );
        assert_eq!(inline_scripts(&words("bash -crm"), &[]), ["rm"]);
        assert!(inline_scripts(&words("ssh host"), &[]).is_empty());
        assert_eq!(
            inline_scripts(&words("find . -name *.log -exec shred -u {} ;"), &[]),
            ["'shred' '-u' './*'"]
        );
        let split = |line: &str| {
            let mut w = words(line);
            w[2] = w[2..].join(" ");
            w.truncate(3);
            peel(w).join(" ")
        };
        assert_eq!(split("sudo env -S rm -rf /"), "rm -rf /");
        assert_eq!(peel(words("env FOO=1 ls")).join(" "), "ls");
        assert_eq!(
            peel(words("GIT_PAGER=less env LANG=C git log")).join(" "),
            "git -c core.pager=less log"
        );
        assert!(peel(words("env -S")).is_empty());
    }
}
