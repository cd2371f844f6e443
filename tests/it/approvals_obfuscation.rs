//! Generated obfuscations (#18): every line of tests/data/dangerous.txt,
//! put through random compositions of the transforms attackers use —
//! quote splicing, `$IFS` blanks, brace lists, variable indirection (one
//! variable or split across two), base64 / hex / rot13 / rev pipelines into
//! a shell, wrappers, `bash -c`, GNU long-option abbreviations, Unicode
//! look-alikes, zero-width characters — must still need approval; every
//! benign line put through changes that keep its meaning (spacing, a
//! trailing `;`, a harmless prefix, a comment, a subshell) must not become
//! flagged. Nothing here runs a command: lines are only detected.

use crate::common;

use base64::Engine;
use common::corpus;
use proptest::prelude::*;
use switchboard::approvals::detect;

/// Transforms that keep a line's meaning for a shell.
const OBFUSCATIONS: usize = 14;

/// A line with nothing a word-level rewrite could break: no quotes,
/// expansions, grouping or operators beyond words and blanks.
fn plain(line: &str) -> bool {
    !line.contains([
        '\'', '"', '$', '`', '(', ')', '{', '}', ';', '|', '&', '<', '>', '\\', '#', ',',
    ])
}

/// The first word and the rest of a plain line.
fn first_word(line: &str) -> Option<(&str, &str)> {
    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
    first
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        .then_some((first, rest))
}

fn rot13(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a') + 13) % 26 + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A') + 13) % 26 + b'A') as char,
            other => other,
        })
        .collect()
}

/// Transform `how` of `line`, or the line unchanged where it does not
/// apply; `pick` chooses among a transform's variants.
fn obfuscate(line: &str, how: usize, pick: usize) -> String {
    let wrappers = [
        "sudo ",
        "env X=1 ",
        "timeout 5 ",
        "nice -n 5 ",
        "flock /tmp/l ",
        "nohup ",
        "command ",
        "setsid ",
        "stdbuf -oL ",
        "ionice -c3 ",
    ];
    let shells = ["sh", "bash", "zsh", "dash", "bash -s"];
    match how % OBFUSCATIONS {
        // Quote splicing inside the command word.
        0 => match first_word(line) {
            Some((first, rest)) if first.len() > 1 => {
                let at = 1 + pick % (first.len() - 1);
                let quote = ["''", "\"\""][pick % 2];
                format!("{}{quote}{} {rest}", &first[..at], &first[at..])
            }
            _ => line.to_string(),
        },
        // $IFS as the blanks.
        // (`$IFS` before a name character would read a longer name.)
        1 if plain(line) => {
            let mut out = String::new();
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                if c != ' ' {
                    out.push(c);
                } else if pick.is_multiple_of(2)
                    || chars
                        .peek()
                        .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '_')
                {
                    out.push_str("${IFS}");
                } else {
                    out.push_str("$IFS");
                }
            }
            out
        }
        // A brace list of the whole command.
        2 if plain(line) && !line.contains('*') => {
            format!("{{{}}}", line.split(' ').collect::<Vec<_>>().join(","))
        }
        // The command word from a variable.
        3 => match first_word(line) {
            Some((first, rest)) => format!("v{pick}={first}; $v{pick} {rest}"),
            None => line.to_string(),
        },
        // Split across two variables.
        4 => match first_word(line) {
            Some((first, rest)) if first.len() > 1 => {
                let at = 1 + pick % (first.len() - 1);
                format!("a={}; b={}; $a$b {rest}", &first[..at], &first[at..])
            }
            _ => line.to_string(),
        },
        // Decoded into a shell.
        5 => format!(
            "echo {} | base64 -d | {}",
            base64::engine::general_purpose::STANDARD.encode(line),
            shells[pick % shells.len()]
        ),
        6 => format!(
            "echo {} | xxd -r -p | {}",
            hex::encode(line),
            shells[pick % shells.len()]
        ),
        7 if !line.contains('\'') => format!(
            "echo '{}' | tr a-zA-Z n-za-mN-ZA-M | {}",
            rot13(line),
            shells[pick % shells.len()]
        ),
        8 if !line.contains('\'') => format!(
            "echo '{}' | rev | {}",
            line.chars().rev().collect::<String>(),
            shells[pick % shells.len()]
        ),
        // A wrapper in front (of a command word: in front of an
        // assignment it would change what the line does).
        9 if first_word(line).is_some() => format!("{}{line}", wrappers[pick % wrappers.len()]),
        // An inline script.
        10 if !line.contains('\'') => format!("{} -c '{line}'", ["bash", "sh", "zsh"][pick % 3]),
        // Long options abbreviated as getopt allows.
        11 => {
            let short = |word: &str| {
                match word {
                    "--recursive" => "--recur",
                    "--force" => "--forc",
                    "--no-preserve-root" => "--no-pres",
                    "--hard" => "--har",
                    "--mirror" => "--mirr",
                    "--delete" => "--del",
                    other => other,
                }
                .to_string()
            };
            line.split(' ').map(short).collect::<Vec<_>>().join(" ")
        }
        // Fullwidth look-alikes of the command word's letters.
        12 => match first_word(line) {
            Some((first, rest)) => {
                let wide: String = first
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap_or(c)
                        } else {
                            c
                        }
                    })
                    .collect();
                format!("{wide} {rest}")
            }
            None => line.to_string(),
        },
        // Zero-width characters inside the command word.
        13 => match first_word(line) {
            Some((first, rest)) if first.len() > 1 => {
                let at = 1 + pick % (first.len() - 1);
                let zero = ['\u{200B}', '\u{200D}', '\u{2060}', '\u{FEFF}'][pick % 4];
                format!("{}{zero}{} {rest}", &first[..at], &first[at..])
            }
            _ => line.to_string(),
        },
        _ => line.to_string(),
    }
}

/// Changes that keep a benign line's meaning and harmlessness.
fn cosmetic(line: &str, how: usize) -> String {
    match how % 7 {
        0 if plain(line) => line.replace(' ', "   "),
        1 => format!("{line};"),
        2 => format!("cd . && {line}"),
        3 => format!("LC_ALL=C {line}"),
        4 => format!("{line} # checked"),
        5 => format!("( {line} )"),
        _ => format!("\t{line}  "),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn every_dangerous_line_survives_generated_obfuscations(
        index in any::<prop::sample::Index>(),
        steps in prop::collection::vec((0..OBFUSCATIONS, any::<usize>()), 1..4),
    ) {
        let lines = dangerous();
        let original = index.get(lines);
        let mut variant = original.clone();
        for (how, pick) in &steps {
            variant = obfuscate(&variant, *how, *pick);
        }
        prop_assert!(
            !detect(&variant).matches.is_empty(),
            "{variant:?} (from {original:?} by {steps:?}) needs no approval"
        );
    }

    #[test]
    fn benign_lines_stay_unflagged_under_cosmetic_changes(
        index in any::<prop::sample::Index>(),
        how in 0..7usize,
    ) {
        let lines = benign();
        let original = index.get(lines);
        let variant = cosmetic(original, how);
        prop_assert!(
            detect(&variant).matches.is_empty(),
            "{variant:?} (from {original:?}) is flagged: {:?}",
            detect(&variant).keys()
        );
    }
}

fn dangerous() -> &'static Vec<String> {
    static LINES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| corpus("dangerous.txt"))
}

/// The benign lines the detector leaves alone (the corpus test bounds the
/// few it flags).
fn benign() -> &'static Vec<String> {
    static LINES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        corpus("benign.txt")
            .into_iter()
            .filter(|l| detect(l).matches.is_empty())
            .collect()
    })
}

#[test]
fn each_transform_keeps_a_known_line_flagged() {
    for how in 0..OBFUSCATIONS {
        for line in [
            "rm -rf /",
            "git push --force origin main",
            "chmod -R 777 /var/www",
        ] {
            let variant = obfuscate(line, how, 3);
            assert!(
                !detect(&variant).matches.is_empty(),
                "transform {how}: {variant:?}"
            );
        }
    }
}
