//! What a `git` command line runs besides git: commands git takes from
//! configuration given on the line (`-c`, `--config-env`, `git config`,
//! `git clone -c`, the environment), aliases with the words after them,
//! options whose value is a command (`rebase -x`, `--upload-pack`,
//! `filter-branch --tree-filter`…, `bisect run`, `submodule foreach`), and
//! `ext::` URLs. Each is a script analysed like `sh -c`'s.

use super::valued::value_of;
use super::words::quote;

/// Options before the subcommand whose value is the next word.
const VALUED: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--attr-source",
    "--super-prefix",
];

/// A git command line's options before its subcommand: the settings of
/// its `-c` (one without `=` is true) and `--config-env` (its value a
/// variable's: `!$VAR`), and where the subcommand is.
fn global(words: &[String]) -> (Vec<(String, String)>, Option<usize>) {
    let mut settings = Vec::new();
    let mut at = 1;
    while let Some(word) = words.get(at) {
        if !word.starts_with('-') {
            return (settings, Some(at));
        }
        let (option, inline) = match word.split_once('=') {
            Some((option, value)) if option.starts_with("--") => (option, Some(value)),
            _ => (word.as_str(), None),
        };
        let value = match inline {
            None if VALUED.contains(&option) => {
                at += 1;
                words.get(at).map(String::as_str)
            }
            inline => inline,
        };
        match (option, value) {
            ("-c", Some(setting)) => settings.push(split_setting(setting)),
            ("--config-env", Some(setting)) => {
                if let Some((key, var)) = setting.split_once('=') {
                    settings.push((key.to_string(), format!("!${var}")));
                }
            }
            _ => {}
        }
        at += 1;
    }
    (settings, None)
}

/// `key=value`, or `key` alone: true.
fn split_setting(setting: &str) -> (String, String) {
    match setting.split_once('=') {
        Some((key, value)) => (key.to_string(), value.to_string()),
        None => (setting.to_string(), "true".to_string()),
    }
}

/// The subcommand of a `git` command line.
pub(super) fn subcommand(words: &[String]) -> Option<&str> {
    global(words).1.map(|at| words[at].as_str())
}

/// The commands a git command line `words` (peeled) runs besides git.
pub(super) fn scripts(words: &[String]) -> Vec<String> {
    let (mut settings, sub) = global(words);
    let mut scripts = Vec::new();
    if let Some(at) = sub {
        let name = words[at].as_str();
        let rest = &words[at + 1..];
        match name {
            "config" => settings.extend(config_setting(rest)),
            "clone" => settings.extend(clone_settings(rest)),
            _ => {}
        }
        scripts.extend(option_commands(name, rest));
        if let Some(expanded) = alias_run(&settings, name, rest) {
            scripts.push(expanded);
        }
    }
    scripts.extend(settings.iter().filter_map(|(key, value)| runs(key, value)));
    // An `ext::` URL: a word, a setting's value (`remote.x.url`), or the
    // URL a `url.<base>.insteadOf` setting names.
    let urls = words[1..].iter().map(String::as_str).chain(
        settings
            .iter()
            .flat_map(|(key, value)| [key.strip_prefix("url.").unwrap_or(""), value.as_str()]),
    );
    scripts.extend(
        urls.filter_map(|w| w.strip_prefix("ext::"))
            .map(ext_command),
    );
    scripts
}

/// Longest chain of aliases followed (git refuses a loop).
const ALIAS_CHAIN: usize = 64;

/// What alias `name`, if `settings` define it, runs with the words `rest`
/// after it: a shell alias (`!…`) gets them as its arguments; another is
/// git with the alias's words, then them, followed here through every
/// alias it names in turn.
fn alias_run(settings: &[(String, String)], name: &str, rest: &[String]) -> Option<String> {
    let alias = |name: &str| {
        let wanted = format!("alias.{}", name.to_ascii_lowercase());
        settings
            .iter()
            .rev()
            .find(|(key, _)| key.to_ascii_lowercase() == wanted)
            .map(|(_, value)| value.as_str())
    };
    let mut value = alias(name)?;
    let mut before: Vec<String> = Vec::new();
    for _ in 0..ALIAS_CHAIN {
        if value.starts_with('!') {
            break;
        }
        let mut words = value.split_whitespace();
        let Some(next) = words
            .next()
            .and_then(|first| alias(first).map(|v| (first, v)))
        else {
            break;
        };
        before.splice(0..0, words.map(str::to_string));
        value = next.1;
    }
    let mut line: Vec<String> = match value.strip_prefix('!') {
        Some(shell) => vec![shell.to_string()],
        None => vec!["git".to_string(), value.to_string()],
    };
    line.extend(before.iter().chain(rest).map(|w| quote(w)));
    Some(line.join(" "))
}

/// `git config`'s setting: `[set] key value` after its options (those
/// that take a value skipped with it).
fn config_setting(rest: &[String]) -> Option<(String, String)> {
    const CONFIG_VALUED: &[&str] = &[
        "-f",
        "--file",
        "--blob",
        "--type",
        "--default",
        "--comment",
        "--value",
    ];
    let mut operands = Vec::new();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        if CONFIG_VALUED.contains(&word.as_str()) {
            words.next();
        } else if !word.starts_with('-') {
            operands.push(word.as_str());
        }
    }
    let operands = match operands.as_slice() {
        ["set", rest @ ..] => rest,
        all => all,
    };
    match operands {
        [key, value, ..] => Some((key.to_string(), value.to_string())),
        _ => None,
    }
}

/// `git clone`'s `-c key=value` / `--config key=value` settings.
fn clone_settings(rest: &[String]) -> Vec<(String, String)> {
    let mut settings = Vec::new();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        let setting = match word.as_str() {
            "-c" | "--config" => words.next().map(String::as_str),
            w => w.strip_prefix("--config="),
        };
        settings.extend(setting.map(split_setting));
    }
    settings
}

/// Commands given to subcommand `name` as option values or operands:
/// `rebase -x`, `difftool -x`/`--extcmd`, `--exec`, `--upload-pack`,
/// `--receive-pack`, `clone -u`, filter-branch's filters, send-email's
/// commands, `bisect run …`, `submodule foreach …`.
fn option_commands(name: &str, rest: &[String]) -> Vec<String> {
    const LONG: &[&str] = &[
        "--exec",
        "--upload-pack",
        "--receive-pack",
        "--extcmd",
        "--sendmail-cmd",
        "--to-cmd",
        "--cc-cmd",
        "--header-cmd",
        "--tree-filter",
        "--index-filter",
        "--msg-filter",
        "--env-filter",
        "--commit-filter",
        "--parent-filter",
        "--tag-name-filter",
        "--setup",
    ];
    let mut options = LONG.to_vec();
    match name {
        "rebase" | "difftool" | "mergetool" => options.push("-x"),
        "clone" => options.push("-u"),
        _ => {}
    }
    let mut commands = Vec::new();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        commands.extend(value_of(word, &options, || words.next()));
    }
    let after = |marker: &str| {
        rest.iter()
            .position(|w| w == marker)
            .map(|at| {
                rest[at + 1..]
                    .iter()
                    .skip_while(|w| w.starts_with('-'))
                    .map(|w| w.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|command| !command.is_empty())
    };
    match name {
        "bisect" => commands.extend(after("run")),
        "submodule" => commands.extend(after("foreach")),
        _ => {}
    }
    commands
}

/// The command line of an `ext::` URL's command, its words quoted: words
/// are split at spaces, `% ` is a space inside a word and `%%` a `%`.
fn ext_command(spec: &str) -> String {
    let mut words = vec![String::new()];
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('%', Some(&next @ (' ' | '%'))) => {
                chars.next();
                words.last_mut().expect("one word at least").push(next);
            }
            (' ', _) => words.push(String::new()),
            _ => words.last_mut().expect("one word at least").push(c),
        }
    }
    words
        .iter()
        .filter(|w| !w.is_empty())
        .map(|w| quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Git configuration the variables `assigned` for a git command set, as
/// its `-c key=value` words: `GIT_SSH_COMMAND`, `GIT_PAGER`, `PAGER`,
/// `EDITOR` and the like, `GIT_CONFIG_KEY_n` with `GIT_CONFIG_VALUE_n`,
/// `GIT_CONFIG_PARAMETERS`.
pub(super) fn environment(assigned: &[String]) -> Vec<String> {
    const KEYS: &[(&str, &str)] = &[
        ("GIT_SSH_COMMAND", "core.sshcommand"),
        ("GIT_SSH", "core.sshcommand"),
        ("GIT_PAGER", "core.pager"),
        ("PAGER", "core.pager"),
        ("GIT_EDITOR", "core.editor"),
        ("EDITOR", "core.editor"),
        ("VISUAL", "core.editor"),
        ("GIT_SEQUENCE_EDITOR", "sequence.editor"),
        ("GIT_EXTERNAL_DIFF", "diff.external"),
        ("GIT_ASKPASS", "core.askpass"),
        ("SSH_ASKPASS", "core.askpass"),
        ("GIT_PROXY_COMMAND", "core.gitproxy"),
    ];
    let vars: Vec<(&str, &str)> = assigned.iter().filter_map(|a| a.split_once('=')).collect();
    let get = |name: &str| vars.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let mut settings: Vec<(String, String)> = KEYS
        .iter()
        .filter_map(|(var, key)| get(var).map(|value| (key.to_string(), value.to_string())))
        .collect();
    for (name, key) in &vars {
        if let Some(n) = name.strip_prefix("GIT_CONFIG_KEY_")
            && let Some(value) = get(&format!("GIT_CONFIG_VALUE_{n}"))
        {
            settings.push((key.to_string(), value.to_string()));
        }
    }
    if let Some(parameters) = get("GIT_CONFIG_PARAMETERS") {
        settings.extend(quoted_words(parameters).iter().map(|w| split_setting(w)));
    }
    settings
        .into_iter()
        .flat_map(|(key, value)| ["-c".to_string(), format!("{key}={value}")])
        .collect()
}

/// The words of `text` as a shell would split it with single quotes and
/// backslashes (the form of `GIT_CONFIG_PARAMETERS`).
fn quoted_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '\\' if !quoted => word.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Whether `value` is one of git's spellings of true.
fn truthy(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "true" | "yes" | "on" | "1"
    )
}

/// The command git runs for configuration `key` set to `value`: an alias
/// (`!…` a shell command, otherwise git with its words), a key whose value
/// is a program (the pager, the editor, ssh, a filter, a diff or merge
/// driver, a credential helper, a submodule's `!` update…), or the push a
/// remote's refspec (forcing `+…`, deleting `:…`) or mirroring makes of
/// every push.
fn runs(key: &str, value: &str) -> Option<String> {
    let key = key.to_ascii_lowercase();
    if key.starts_with("alias.") {
        return Some(match value.strip_prefix('!') {
            Some(shell) => shell.to_string(),
            None => format!("git {value}"),
        });
    }
    let variable = key.rsplit('.').next().unwrap_or_default();
    if key.starts_with("remote.") {
        match variable {
            "push" if value.starts_with('+') => return Some("git push --force".into()),
            "push" if value.starts_with(':') => return Some("git push --delete".into()),
            "mirror" if truthy(value) => return Some("git push --mirror".into()),
            _ => {}
        }
    }
    let runs = matches!(
        key.as_str(),
        "core.sshcommand"
            | "core.gitproxy"
            | "core.pager"
            | "core.editor"
            | "core.fsmonitor"
            | "core.askpass"
            | "sequence.editor"
            | "diff.external"
            | "interactive.difffilter"
            | "uploadpack.packobjectshook"
    ) || key.starts_with("pager.")
        || variable.ends_with("cmd")
        || variable.ends_with("command")
        || (variable == "update" && value.starts_with('!'))
        || (variable == "smtpserver" && value.starts_with('/'))
        || matches!(
            variable,
            "textconv"
                | "driver"
                | "clean"
                | "smudge"
                | "process"
                | "program"
                | "helper"
                | "uploadpack"
                | "receivepack"
        );
    runs.then(|| value.strip_prefix('!').unwrap_or(value).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &[&str]) -> Vec<String> {
        line.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn commands_in_settings_aliases_and_options_are_found() {
        let found = scripts(&words(&[
            "git",
            "-c",
            "alias.x=!rm -rf ~",
            "-c",
            "alias.p=push -f",
            "-c",
            "core.sshCommand=shred x",
            "-c",
            "user.name=a",
            "x",
        ]));
        assert_eq!(found, ["rm -rf ~", "rm -rf ~", "git push -f", "shred x"]);
        assert_eq!(
            scripts(&words(&[
                "git",
                "-c",
                "alias.p=push",
                "p",
                "--force",
                "origin"
            ])),
            ["git push '--force' 'origin'", "git push"]
        );
        assert_eq!(
            scripts(&words(&[
                "git",
                "config",
                "-f",
                ".git/config",
                "filter.x.smudge",
                "!mkfs"
            ])),
            ["mkfs"]
        );
        assert_eq!(
            scripts(&words(&["git", "clone", "ext::sh -c reboot% now", "repo"])),
            ["'sh' '-c' 'reboot now'"]
        );
        assert_eq!(
            scripts(&words(&["git", "rebase", "-x", "make test", "main"])),
            ["make test"]
        );
        assert_eq!(
            scripts(&words(&["git", "rebase", "-ix", "make test", "main"])),
            ["make test"]
        );
        let chain: Vec<String> = (0..12)
            .flat_map(|i| ["-c".to_string(), format!("alias.a{i}=a{}", i + 1)])
            .chain([
                "-c".into(),
                "alias.a12=push".into(),
                "a0".into(),
                "-f".into(),
            ])
            .collect();
        let mut line = vec!["git".to_string()];
        line.extend(chain);
        assert!(scripts(&line).contains(&"git push '-f'".to_string()));
        assert!(scripts(&words(&["git", "commit", "-m", "fix context::reboot"])).is_empty());
        assert_eq!(
            scripts(&words(&["git", "bisect", "run", "./check.sh", "x"])),
            ["./check.sh x"]
        );
        assert_eq!(
            scripts(&words(&["git", "-c", "remote.o.mirror", "push", "o"])),
            ["git push --mirror"]
        );
        assert_eq!(
            scripts(&words(&["git", "--config-env=core.pager=P", "log"])),
            ["$P"]
        );
        assert!(scripts(&words(&["git", "config", "user.name", "alice"])).is_empty());
        assert!(scripts(&words(&["git", "add", "-u"])).is_empty());
    }

    #[test]
    fn configuration_in_the_environment_becomes_settings() {
        let settings = |assigned: &[&str]| environment(&words(assigned)).join(" ");
        assert_eq!(
            settings(&["GIT_SSH_COMMAND=shred x"]),
            "-c core.sshcommand=shred x"
        );
        assert_eq!(
            settings(&[
                "GIT_CONFIG_COUNT=1",
                "GIT_CONFIG_KEY_0=alias.x",
                "GIT_CONFIG_VALUE_0=!mkfs /dev/sda"
            ]),
            "-c alias.x=!mkfs /dev/sda"
        );
        assert_eq!(
            settings(&["GIT_CONFIG_PARAMETERS='alias.y'='!reboot now'"]),
            "-c alias.y=!reboot now"
        );
        assert_eq!(settings(&["LANG=C"]), "");
    }
}
