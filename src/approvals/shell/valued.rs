//! Commands handed to a program as an option's value, which it runs:
//! `tar --to-command=…`, `rsync -e …`, `ssh -o ProxyCommand=…`,
//! `script -c …`, `nc -e …`, `socat EXEC:…`. Each value is a script
//! analysed like `sh -c`'s.

/// For a program, its options whose value is a command line: long ones
/// (`--opt VALUE`, `--opt=VALUE`) and short ones (`-o VALUE`, `-oVALUE`).
const OPTIONS: &[(&str, &[&str])] = &[
    (
        "tar",
        &[
            "--to-command",
            "--use-compress-program",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "-I",
            "-F",
        ],
    ),
    ("rsync", &["-e", "--rsh", "--rsync-path"]),
    ("scp", &["-S"]),
    ("sftp", &["-S"]),
    ("script", &["-c", "--command"]),
    ("flock", &["-c", "--command"]),
    ("su", &["-c", "--command", "--session-command"]),
    ("runuser", &["-c", "--command", "--session-command"]),
    ("sg", &["-c"]),
    ("nc", &["-e", "-c"]),
    ("ncat", &["-e", "-c", "--exec", "--sh-exec", "--lua-exec"]),
    ("netcat", &["-e", "-c"]),
    ("man", &["-P", "--pager", "-H", "--html"]),
    ("zip", &["-TT", "--unzip-command"]),
    ("rg", &["--pre"]),
    ("fd", &["-x", "--exec", "-X", "--exec-batch"]),
    ("fdfind", &["-x", "--exec", "-X", "--exec-batch"]),
    ("watchexec", &["--shell"]),
    ("nodemon", &["--exec", "-x"]),
    (
        "hyperfine",
        &["--prepare", "-p", "--setup", "-s", "--cleanup", "-c"],
    ),
    ("npm", &["-c", "--call"]),
    ("npx", &["-c", "--call"]),
    ("go", &["-exec", "-toolexec"]),
];

/// `ssh -o` settings whose value is a command.
const SSH_COMMANDS: &[&str] = &["proxycommand", "localcommand", "knownhostscommand"];

/// The commands `words` (a peeled command) hands to its program as option
/// values.
pub(super) fn scripts(words: &[String]) -> Vec<String> {
    let Some(name) = words.first().map(String::as_str) else {
        return Vec::new();
    };
    let mut scripts = Vec::new();
    if let Some((_, options)) = OPTIONS.iter().find(|(program, _)| *program == name) {
        let mut rest = words[1..].iter();
        while let Some(word) = rest.next() {
            if let Some(value) = value_of(word, options, || rest.next()) {
                scripts.push(value);
            }
        }
    }
    match name {
        // `-o ProxyCommand=…` (also `-oProxyCommand=…`, `-o "ProxyCommand …"`).
        "ssh" | "scp" | "sftp" => {
            let mut rest = words[1..].iter();
            while let Some(word) = rest.next() {
                let setting = if takes_next(word, "o") {
                    rest.next().map(String::as_str)
                } else {
                    word.strip_prefix("-o")
                };
                if let Some((key, value)) = setting.and_then(|s| s.split_once(['=', ' ']))
                    && SSH_COMMANDS.contains(&key.trim().to_ascii_lowercase().as_str())
                {
                    scripts.push(value.trim().to_string());
                }
            }
        }
        // `EXEC:cmd` / `SYSTEM:cmd` addresses (options after a comma).
        "socat" => scripts.extend(words[1..].iter().filter_map(|w| {
            let (kind, rest) = w.split_once(':')?;
            matches!(kind.to_ascii_uppercase().as_str(), "EXEC" | "SYSTEM")
                .then(|| rest.split(',').next().unwrap_or_default().to_string())
        })),
        // `-c '!cmd'`, `--cmd ':!cmd'`, `+'!cmd'`: an editor's shell escape.
        "vim" | "vi" | "nvim" | "ex" | "view" | "vimdiff" | "gvim" => {
            let mut rest = words[1..].iter();
            while let Some(word) = rest.next() {
                let command = match word.as_str() {
                    "-c" | "--cmd" => rest.next().map(String::as_str),
                    w => w.strip_prefix('+'),
                };
                if let Some(shell) = command
                    .map(|c| c.trim_start_matches([':', ' ']))
                    .and_then(|c| c.strip_prefix('!'))
                {
                    scripts.push(shell.to_string());
                }
            }
        }
        // The command of a new session, window or pane, or of `run-shell`:
        // the words after the subcommand's options.
        "tmux" => {
            const RUNS: &[&str] = &[
                "new-session",
                "new",
                "new-window",
                "neww",
                "split-window",
                "splitw",
                "run-shell",
                "run",
                "respawn-pane",
                "respawnp",
                "respawn-window",
                "respawnw",
            ];
            if let Some(at) = words.iter().position(|w| RUNS.contains(&w.as_str())) {
                let valued = if matches!(words[at].as_str(), "run-shell" | "run") {
                    "sntcxyFefld"
                } else {
                    "sntcxyFefl"
                };
                let mut rest = words[at + 1..].iter().enumerate();
                while let Some((i, word)) = rest.next() {
                    if word.starts_with('-') {
                        // Options with a value: -s -n -t -c -x -y -F -e -f -l,
                        // and run-shell's -d.
                        if takes_next(word, valued) {
                            rest.next();
                        }
                        continue;
                    }
                    scripts.push(words[at + 1 + i..].join(" "));
                    break;
                }
            }
        }
        // `--checkpoint-action=exec=…`.
        "tar" => scripts.extend(
            words[1..]
                .iter()
                .filter_map(|w| w.strip_prefix("--checkpoint-action=exec="))
                .map(str::to_string),
        ),
        // `-o APT::Update::Pre-Invoke::=…`, `-o DPkg::Post-Invoke::=…`.
        "apt" | "apt-get" => scripts.extend(
            words[1..]
                .iter()
                .filter(|w| w.to_ascii_lowercase().contains("invoke"))
                .filter_map(|w| w.split_once('=').map(|(_, command)| command.to_string())),
        ),
        _ => {}
    }
    scripts
}

/// Whether short option `word` (alone, `-o`, or last in a cluster, `-vo`)
/// is one of `letters`, which take the next word as their value.
pub(super) fn takes_next(word: &str, letters: &str) -> bool {
    let Some(cluster) = word.strip_prefix('-') else {
        return false;
    };
    !cluster.is_empty()
        && !cluster.starts_with('-')
        && cluster.chars().all(|c| c.is_ascii_alphabetic())
        && cluster.ends_with(|c: char| letters.contains(c))
}

/// The value of `word` when it is one of `options` (`--opt=V`, `-oV`, or
/// the next word, taken from `next`, after `--opt`, `-o` or `-qo`).
pub(super) fn value_of<'a>(
    word: &str,
    options: &[&str],
    next: impl FnOnce() -> Option<&'a String>,
) -> Option<String> {
    // The option itself, or last in a cluster of short ones (`-qc`).
    let clustered = |option: &&str| option.len() == 2 && takes_next(word, &option[1..]);
    if options.contains(&word) || options.iter().any(clustered) {
        return next().cloned();
    }
    options.iter().find_map(|option| {
        if option.len() > 2 {
            word.strip_prefix(*option)?
                .strip_prefix('=')
                .map(str::to_string)
        } else if option.len() == 2 && !word.starts_with("--") {
            word.strip_prefix(*option)
                .filter(|value| !value.is_empty())
                .map(str::to_string)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &[&str]) -> Vec<String> {
        line.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn option_values_that_are_commands_are_found() {
        assert_eq!(
            scripts(&words(&["tar", "xf", "a.tar", "--to-command=sh x"])),
            ["sh x"]
        );
        assert_eq!(
            scripts(&words(&[
                "tar",
                "cf",
                "/dev/null",
                "--checkpoint-action=exec=reboot"
            ])),
            ["reboot"]
        );
        assert_eq!(
            scripts(&words(&["rsync", "-e", "sh -c reboot", "a", "b:"])),
            ["sh -c reboot"]
        );
        assert_eq!(
            scripts(&words(&["ssh", "-o", "ProxyCommand=reboot", "h"])),
            ["reboot"]
        );
        assert_eq!(scripts(&words(&["script", "-qc", "reboot"])), ["reboot"]);
        assert_eq!(scripts(&words(&["script", "-creboot"])), ["reboot"]);
        assert_eq!(
            scripts(&words(&["socat", "-", "EXEC:reboot now,pty"])),
            ["reboot now"]
        );
        assert_eq!(scripts(&words(&["vim", "-c", ":!reboot", "x"])), ["reboot"]);
        assert_eq!(scripts(&words(&["vim", "+!reboot"])), ["reboot"]);
        assert_eq!(
            scripts(&words(&["tmux", "new", "-d", "-s", "w", "reboot now"])),
            ["reboot now"]
        );
        assert!(scripts(&words(&["vim", "+42", "notes.txt"])).is_empty());
        assert!(scripts(&words(&["tmux", "new", "-s", "work"])).is_empty());
        assert_eq!(
            scripts(&words(&["tmux", "new", "-ds", "w", "reboot now"])),
            ["reboot now"]
        );
        assert_eq!(
            scripts(&words(&["ssh", "-vo", "ProxyCommand=reboot", "h"])),
            ["reboot"]
        );
        assert_eq!(
            scripts(&words(&["go", "test", "-exec=reboot", "./..."])),
            ["reboot"]
        );
        assert!(scripts(&words(&["tar", "xzf", "a.tgz"])).is_empty());
        assert!(scripts(&words(&["rsync", "-av", "src/", "dst/"])).is_empty());
    }
}
