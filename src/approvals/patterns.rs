//! The table of dangerous command patterns (SPEC §4). Each has a stable
//! key (used by allowlists and session grants), a description for people,
//! where it is matched, and whether it is a hard block that no approval
//! unlocks.
//!
//! Word boundaries are ASCII (`(?-u:\b)`): a Unicode one makes the regex
//! engine leave its DFA on any non-ASCII input, a slow path a hostile
//! command could fill with emoji. Each borders an ASCII letter of its
//! keyword, none an `s` or `k` of a case-insensitive pattern (`ſ` and the
//! Kelvin sign fold to them).

/// What a pattern is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Each simple command with wrappers peeled (`rm -rf x`).
    Command,
    /// Each simple command with its wrappers (`sudo -S …`, `xargs rm`).
    Raw,
    /// The whole top-level line, operators included (`curl … | sh`).
    Line,
    /// Each simple command that may carry SQL (not a search tool's
    /// pattern), block comments removed (`DROP/**/TABLE`).
    Sql,
}

/// One dangerous pattern.
#[derive(Debug, Clone, Copy)]
pub struct Pattern {
    /// Stable key.
    pub key: &'static str,
    /// What it means, for the approval prompt.
    pub description: &'static str,
    /// The regular expression.
    pub regex: &'static str,
    /// Where it is matched.
    pub scope: Scope,
    /// True when nothing may unlock it.
    pub hard: bool,
}

const fn p(
    key: &'static str,
    description: &'static str,
    regex: &'static str,
    scope: Scope,
    hard: bool,
) -> Pattern {
    Pattern {
        key,
        description,
        regex,
        scope,
        hard,
    }
}

use Scope::{Command as C, Line as L, Raw as R, Sql as Q};

/// The root, system directories and home directories (hard-block targets).
macro_rules! system_target {
    () => {
        r"(?:/|/\*|~|~/|~/\*|/(?:bin|boot|dev|etc|home|lib|lib32|lib64|libx32|opt|proc|root|run|sbin|srv|sys|usr|var|snap|mnt|media)(?:/\*?)?)"
    };
}

/// Services whose restart cuts people off (remote access, networking) or
/// drops what is in flight (databases, the container runtime).
macro_rules! critical_service {
    () => {
        r"(?:ssh|sshd|openssh-server|networking|network|NetworkManager|systemd-networkd|systemd-resolved|wpa_supplicant|firewalld|ufw|iptables|nftables|postgresql\S*|mysql|mysqld|mariadb|redis\S*|mongod|docker|containerd|kubelet|dbus|systemd-logind|cron|crond|rsyslog|switchboard)(?:\.service)?(?:\s|$)"
    };
}

/// A recursive flag of rm.
macro_rules! rm_recursive {
    () => {
        r"(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)"
    };
}

/// Any way of changing or removing the file `$target`: a redirection, a
/// copy or move onto it, in-place edits, deletion, permission changes.
macro_rules! writes_to {
    ($target:expr) => {
        concat!(
            r"(?:(?:^|\s)(?:>|>>|>\||&>|&>>)\s",
            $target,
            r"|^(?:tee|cp|mv|install|ln|rsync|truncate|shred|dd)\s(?:.*\s)?(?:of=)?",
            $target,
            r"|^(?:sed|perl)\s(?:.*\s)?-[a-zA-Z]*i\S*\s(?:.*\s)?",
            $target,
            r"|^(?:rm|unlink|chown|chattr)\s(?:.*\s)?",
            $target,
            r"|^chmod\s(?:.*\s)?(?:[0-7]?[0-7][2367][0-7]|[0-7]?[0-7][0-7][2367]|\S*[+=]\S*w\S*)\s(?:.*\s)?",
            $target,
            r")"
        )
    };
}

/// Every pattern, hard blocks first.
pub const PATTERNS: &[Pattern] = &[
    p(
        "rm_system",
        "recursively deletes the root, a system directory or a home directory",
        concat!(
            r"^rm\s(?:.*\s)?",
            rm_recursive!(),
            r"(?:\s.*)?\s",
            system_target!(),
            r"(?:\s|$)|^rm\s(?:.*\s)?",
            system_target!(),
            r"\s(?:.*\s)?",
            rm_recursive!(),
            r"(?:\s|$)|^rm\s.*--no-preserve-root"
        ),
        C,
        true,
    ),
    p(
        "mkfs_device",
        "formats a disk device",
        r"^mkfs(?:\.\w+)?\s(?:.*\s)?/dev/|^(?:mke2fs|mkswap|wipefs|mkdosfs|mkntfs)\s(?:.*\s)?/dev/",
        C,
        true,
    ),
    p(
        "dd_device",
        "writes raw data onto a disk device",
        r"^dd\s(?:.*\s)?of=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|loop|mapper/)",
        C,
        true,
    ),
    p(
        "block_device_write",
        "writes directly to a disk device",
        r"(?:>|>>|>\||&>)\s/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/)|^(?:cp|tee|shred)\s(?:.*\s)?/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md)\w*(?:\s|$)",
        C,
        true,
    ),
    p(
        "fork_bomb",
        "a fork bomb that exhausts the machine",
        r"\S*\(\s*\)\s*\{[^}]*\|[^}]*&[^}]*\}",
        L,
        true,
    ),
    p(
        "kill_all",
        "kills every process the user can reach (kill -1)",
        r"^kill\s+(?:-(?:s\s+|n\s+)?\S+\s+)?(?:--\s+)?-1$|^kill\s+-1$",
        C,
        true,
    ),
    p(
        "power_off",
        "shuts down or reboots the machine",
        r"^(?:shutdown|reboot|halt|poweroff)(?:\s|$)|^systemctl\s(?:.*\s)?(?:poweroff|reboot|halt|kexec)(?:\s|$)|^(?:tel)?init\s+[06](?:\s|$)",
        C,
        true,
    ),
    p(
        "recursive_delete",
        "deletes files recursively",
        concat!(r"^rm\s(?:.*\s)?", rm_recursive!(), r"(?:\s|$)"),
        C,
        false,
    ),
    p(
        "find_delete",
        "deletes the files find matches",
        r"^find\s.*\s(?:-delete|-exec(?:dir)?\s+(?:\S*/)?(?:rm|shred|unlink)(?:\s|$))",
        C,
        false,
    ),
    p(
        "xargs_rm",
        "deletes files named on its input (xargs rm)",
        r"(?:^|\s)xargs\s(?:.*\s)?(?:\S*/)?(?:rm|shred|unlink)(?:\s|$)",
        R,
        false,
    ),
    p(
        "chmod_world_writable",
        "makes files writable by everyone",
        r"^chmod\s(?:.*\s)?(?:[0-7]{2,3}[2367]|(?:\S*,)?[ugoa]*[oa][ugoa]*[+=][rwxXst]*w[rwxXst]*(?:,\S*)?)(?:\s|$)",
        C,
        false,
    ),
    p(
        "chmod_recursive_system",
        "changes permissions recursively on system paths",
        concat!(
            r"^chmod\s(?:.*\s)?-[a-zA-Z]*R\S*\s(?:.*\s)?",
            system_target!(),
            r"(?:\s|$)"
        ),
        C,
        false,
    ),
    p(
        "chown_recursive_root",
        "gives files to root recursively",
        r"^chown\s(?:.*\s)?(?:-[a-zA-Z]*R\S*|--recursive)\s(?:.*\s)?(?:root|0)(?::\S*)?(?:\s|$)",
        C,
        false,
    ),
    p(
        "mkfs",
        "creates a file system",
        r"^mkfs(?:\.\w+)?(?:\s|$)|^(?:mke2fs|mkswap|wipefs)(?:\s|$)",
        C,
        false,
    ),
    p(
        "dd",
        "copies raw data with dd",
        r"^dd\s(?:.*\s)?of=",
        C,
        false,
    ),
    p(
        "sql_drop",
        "drops a database object (SQL DROP)",
        r"(?i)(?-u:\b)drop\s+(?:table|database|schema|index|view|user|role|owned)(?-u:\b)",
        Q,
        false,
    ),
    p(
        "sql_truncate",
        "empties a table (SQL TRUNCATE)",
        r"(?i)(?-u:\b)truncate\s+(?:table\s+)?(?:only\s+)?[`\x22\w.]+(?:\s*,\s*[`\x22\w.]+)*(?:\s+(?:restart|continue)\s+identity)?(?:\s+(?:cascade|restrict))?\s*(?:;|$)",
        Q,
        false,
    ),
    p(
        "sql_delete_all",
        "deletes every row of a table (DELETE without WHERE)",
        r"(?i)(?-u:\b)delete\s+from\s+[`\x22\w.]+\s*(?:;|$)",
        Q,
        false,
    ),
    p(
        "database_wipe",
        "drops a database or flushes a data store with its own tool (dropdb, mysqladmin drop, redis FLUSHALL, dropDatabase)",
        r"(?i)^(?:dropdb|dropuser)(?:\s|$)|^mysqladmin\s(?:.*\s)?drop(?:\s|$)|^redis-cli\s(?:.*\s)?(?:flushall|flushdb)(?:\s|$)|^(?:mongo|mongosh)\s.*(?-u:\b)dropDatabase\s*\(",
        C,
        false,
    ),
    p(
        "sql_tautology",
        "changes or deletes rows under a condition that is always true (WHERE 1=1, OR 1=1)",
        r"(?i)(?-u:\b)(?:delete|update)(?-u:\b)[^;]*(?-u:\b)(?:where|or)\s+\(?\s*(?:true|not\s+false|(\d+)\s*=\s*\d+|'[^']*'\s*=\s*'[^']*'|\x22[^\x22]*\x22\s*=\s*\x22[^\x22]*\x22)(?:\s|\)|;|$)",
        Q,
        false,
    ),
    p(
        "crontab_install",
        "replaces or removes the user's crontab",
        r"^crontab\s(?:-u\s+\S+\s+)?(?:-r|-e|-|[^-\s]\S*)(?:\s|$)",
        C,
        false,
    ),
    p(
        "system_config_write",
        "changes system configuration under /etc, /boot or /usr",
        writes_to!(r"(?:/(?:etc|boot|usr|lib|sys|proc)/\S*|/var/spool/cron\S*)"),
        C,
        false,
    ),
    p(
        "shell_rc_write",
        "changes a shell startup file",
        writes_to!(
            r"~/\.(?:bashrc|bash_profile|bash_login|profile|zshrc|zprofile|zshenv|zlogin|kshrc|cshrc|tcshrc|config/fish/\S*)(?:\s|$)"
        ),
        C,
        false,
    ),
    p(
        "ssh_key_write",
        "changes SSH keys or authorized_keys",
        writes_to!(r"\S*/\.ssh(?:/\S*)?(?:\s|$)"),
        C,
        false,
    ),
    p(
        "credential_write",
        "changes a credentials file",
        writes_to!(
            r"(?:~/\.(?:aws/credentials|aws/config|netrc|git-credentials|docker/config\.json|kube/config|npmrc|pypirc|pgpass|gnupg\S*)|/etc/(?:shadow|gshadow|sudoers\S*|passwd))(?:\s|$)"
        ),
        C,
        false,
    ),
    p(
        "credential_read",
        "reads private keys or credentials (possible exfiltration)",
        r"^(?:cat|less|more|head|tail|cp|scp|base64|xxd|strings|curl|nc)\s(?:.*\s)?@?(?:~/\.ssh/id_[a-z0-9]+(?:\s|$)|~/\.aws/credentials|~/\.netrc|~/\.git-credentials|~/\.docker/config\.json|~/\.kube/config|/etc/shadow)",
        C,
        false,
    ),
    p(
        "project_env_write",
        "changes or deletes the project's .env or gateway configuration",
        writes_to!(r"(?:\S*/)?(?:\.env(?:\.[\w.-]+)?|gateway\.toml|switchboard\.env)(?:\s|$)"),
        C,
        false,
    ),
    p(
        "service_stop",
        "stops, disables or masks a system service, restarts a critical one (ssh, networking, a database), or changes the runlevel",
        concat!(
            r"^systemctl\s(?:.*\s)?(?:stop|disable|mask|kill|isolate|rescue|emergency|default)(?:\s|$)|^service\s+\S+\s+stop(?:\s|$)|^launchctl\s+(?:unload|stop|remove|bootout)(?:\s|$)|^rc-service\s+\S+\s+stop|^(?:tel)?init\s+[12345sS](?:\s|$)",
            r"|^systemctl\s(?:.*\s)?(?:restart|try-restart|reload-or-restart|try-reload-or-restart|condrestart|force-reload|reload)\s(?:.*\s)?",
            critical_service!(),
            r"|^(?:service|rc-service)\s+",
            critical_service!(),
            r"\s*(?:restart|reload|force-reload|condrestart|try-restart)(?:\s|$)"
        ),
        C,
        false,
    ),
    p(
        "kill_init",
        "sends a signal to init (PID 1)",
        r"^kill\s+(?:(?:-s|-n|--signal)\s+\S+\s+|-\S+\s+)*(?:--\s+)?1(?:\s|$)",
        C,
        false,
    ),
    p(
        "root_shell",
        "opens a root shell (sudo su, sudo bash)",
        r"(?:^|\s)(?:sudo|doas)\s(?:.*\s)?(?:su|bash|sh|zsh|dash|ksh|fish)(?:\s+-\S*)*(?:\s+root)?$",
        R,
        false,
    ),
    p(
        "su_root",
        "switches to root (su)",
        r"^su(?:\s+-\S*)*(?:\s+root)?(?:\s+-\S*)*$",
        C,
        false,
    ),
    p(
        "mass_kill",
        "kills processes by name with SIGKILL",
        r"^(?:pkill|killall)\s(?:.*\s)?(?:-9|-KILL|-SIGKILL|--signal[= ](?:9|KILL|SIGKILL)|-s\s+(?:9|KILL|SIGKILL))(?:\s|$)",
        C,
        false,
    ),
    p(
        "script_exec",
        "runs an inline script (sh -c, python -c, eval, heredoc)",
        r"^(?:sh|bash|zsh|dash|ksh|fish|ash|su)\s(?:.*\s)?-[a-zA-Z]*c[a-zA-Z]*(?:\s|$)|^(?:python[\d.]*|pypy[\d.]*|ipython\d*)(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+-[a-zA-Z]*c\S*(?:\s|$)|^(?:perl|ruby)(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+-[a-zA-Z]*[eE]\S*(?:\s|$)|^(?:node|nodejs|bun)(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+(?:-[a-z]*[ep][a-z]*\S*|--eval|--print)(?:[\s=]|$)|^php(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+-[rBRE]\S*(?:\s|$)|^(?:lua[\d.]*|luajit|Rscript|R|julia|osascript)(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+(?:-e\S*|--eval)(?:\s|$)|^deno\s+eval(?:\s|$)|^eval(?:\s|$)|^(?:sh|bash|zsh|dash|ksh|python[\d.]*|perl|ruby|node|php)\s(?:-\S*\s+)*(?:<<|<<<)|^(?:sh|bash|zsh|dash)\s+-s(?:\s|$)|^source\s+/dev/stdin",
        C,
        false,
    ),
    p(
        "awk_sed_exec",
        "runs commands from awk (system, pipes) or GNU sed (the e command)",
        r#"^(?:g|m|n)?awk\s.*(?:(?-u:\b)system\s*\(|\|\s*getline|(?-u:\b)print[^|;]*\|\s*\S)|^sed\s(?:.*\s)?(?:\d+|\$|/[^/]*/)?e\s|^sed\s(?:.*\s)?s/[^/]*/[^/]*/[gpIiMm0-9]*e[gpIiMm0-9]*(?:\s|$)"#,
        C,
        false,
    ),
    p(
        "pipe_to_shell",
        "pipes downloaded content into a shell",
        r"(?-u:\b)(?:curl|wget|fetch|aria2c)(?-u:\b)[^;&|]*\|\s(?:sudo\s(?:-\S+\s)*)?(?:\S*/)?(?:sh|bash|zsh|dash|ksh|fish)(?-u:\b)|(?:^|\s)(?:sh|bash|zsh|dash|python[\d.]*)\s(?:-c\s)?[<$]\((?:curl|wget)",
        L,
        false,
    ),
    p(
        "git_reset_hard",
        "discards local changes (git reset --hard)",
        r"^git\s(?:.*\s)?reset\s(?:.*\s)?--hard(?:\s|$)",
        C,
        false,
    ),
    p(
        "git_force_push",
        "rewrites or deletes remote history (git push --force, --delete)",
        r"^git\s(?:.*\s)?push\s(?:.*\s)?(?:-[a-zA-Z0-9]*[fd][a-zA-Z0-9]*|--force|--force-with-lease|--mirror|--delete|--prune)(?:=\S*)?(?:\s|$)|^git\s(?:.*\s)?push\s(?:.*\s)?[+:]\S+",
        C,
        false,
    ),
    p(
        "git_clean",
        "deletes untracked files (git clean -f)",
        r"^git\s(?:.*\s)?clean\s(?:.*\s)?(?:-[a-zA-Z]*f|--force(?:\s|$))",
        C,
        false,
    ),
    p(
        "git_branch_delete",
        "force-deletes or overwrites a branch (git branch -D, -f, -M, -C)",
        r"^git\s(?:.*\s)?branch\s(?:.*\s)?(?:-[a-zA-Z]*[DMCf][a-zA-Z]*|--force)(?:\s|$)",
        C,
        false,
    ),
    p(
        "docker_stop",
        "stops or removes containers",
        r"^docker\s(?:.*\s)?(?:stop|kill|rm|rmi|restart)(?:\s|$)|^docker\s(?:.*\s)?(?:container|compose|system|volume|network|image)\s(?:.*\s)?(?:stop|kill|down|rm|prune|restart)(?:\s|$)|^docker-compose\s(?:.*\s)?(?:down|stop|kill|rm)(?:\s|$)|^podman\s(?:.*\s)?(?:stop|kill|rm)(?:\s|$)",
        C,
        false,
    ),
    p(
        "switchboard_self",
        "stops or restarts switchboard itself",
        r"^(?:systemctl|service)\s(?:.*\s)?(?:stop|restart|kill|reload|disable|mask)\s(?:.*\s)?switchboard|^(?:pkill|killall)\s(?:.*\s)?switchboard|^docker\s(?:.*\s)?(?:stop|restart|kill|rm)\s(?:.*\s)?switchboard|^kill\s(?:.*\s)?\$\((?:pidof|pgrep)\s(?:-\S+\s)*switchboard",
        C,
        false,
    ),
    p(
        "sudo_stdin_shell",
        "sudo reading a password from stdin, opening a shell, or using an askpass helper",
        r"(?:^|\s)(?:sudo|doas)(?:\s+(?:-[ugCDhprtTU]|--user|--group|--prompt|--host|--role|--type|--other-user|--chdir|--command-timeout|--close-from)\s+.*?|\s+-\S+)*?\s+(?:-[a-zA-Z]*[SsAi][a-zA-Z]*|--stdin|--shell|--askpass|--login)(?:\s|$)",
        R,
        false,
    ),
];
