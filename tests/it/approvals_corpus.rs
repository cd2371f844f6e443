//! Detection against the corpora: every line of tests/data/dangerous.txt
//! is flagged, at most 2 % of tests/data/benign.txt is, and quoting or
//! escaping a flagged command never hides it. Nothing here runs a command.

use crate::common;

use common::corpus;
use proptest::prelude::*;
use switchboard::approvals::detect;

#[test]
fn every_dangerous_command_is_flagged() {
    let commands = corpus("dangerous.txt");
    assert!(commands.len() >= 150, "{} commands", commands.len());
    let missed: Vec<&String> = commands
        .iter()
        .filter(|c| detect(c).matches.is_empty())
        .collect();
    assert!(missed.is_empty(), "not flagged: {missed:#?}");
}

#[test]
fn benign_commands_are_rarely_flagged() {
    let commands = corpus("benign.txt");
    assert!(commands.len() >= 150, "{} commands", commands.len());
    let flagged: Vec<(String, Vec<&str>)> = commands
        .iter()
        .map(|c| (c.clone(), detect(c).keys()))
        .filter(|(_, keys)| !keys.is_empty())
        .collect();
    let rate = flagged.len() as f64 / commands.len() as f64;
    assert!(rate <= 0.02, "{:.1}% flagged: {flagged:#?}", rate * 100.0);
}

#[test]
fn hard_blocks_survive_every_disguise() {
    for command in [
        "rm -rf /",
        "mkfs.ext4 /dev/sda",
        "dd if=/dev/zero of=/dev/sda",
        "shutdown now",
        "kill -9 -1",
    ] {
        for disguised in [
            format!("sudo {command}"),
            format!("env X=1 {command}"),
            format!("bash -c '{command}'"),
            format!("echo $({command})"),
            format!("true; {command}"),
            format!("nohup {command} &"),
        ] {
            assert!(
                detect(&disguised).hard_blocked(),
                "{disguised}: {:?}",
                detect(&disguised).keys()
            );
        }
    }
}

const FLAGGED: &[&str] = &[
    "rm -rf build",
    "rm -rf /",
    "git push --force origin main",
    "git reset --hard",
    "chmod -R 777 /var/www",
    "dd if=/dev/zero of=/dev/sda",
    "systemctl stop nginx",
    "docker compose down",
    "mkfs.ext4 /dev/sdb1",
    "pkill -9 node",
    "find . -delete",
    "shutdown -h now",
    "python3 -c print(1)",
    "git clean -fdx",
];

/// One way of writing a word that a shell reads the same.
fn disguise(word: &str, how: u8) -> String {
    match how % 6 {
        0 => word.to_string(),
        1 => format!("'{word}'"),
        2 => format!("\"{word}\""),
        3 => word
            .chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("\\{c}")
                } else {
                    c.to_string()
                }
            })
            .collect(),
        4 => {
            let mut chars = word.chars();
            let first: String = chars.next().map(String::from).unwrap_or_default();
            format!("{first}''{}", chars.as_str())
        }
        _ => format!(
            "$'{}'",
            word.bytes()
                .map(|b| format!("\\x{b:02x}"))
                .collect::<String>()
        ),
    }
}

proptest! {
    #[test]
    fn quoting_and_escaping_keep_commands_flagged(
        index in 0..FLAGGED.len(),
        styles in prop::collection::vec(any::<u8>(), 8),
        prefix in prop::sample::select(vec!["", "sudo ", "env A=b ", "command ", "/usr/bin/env ", "nice -n 3 ", "timeout 9 "]),
        absolute in any::<bool>(),
    ) {
        let original = FLAGGED[index];
        let expected = detect(original).keys();
        let mut words: Vec<String> = original
            .split(' ')
            .enumerate()
            .map(|(i, w)| disguise(w, styles[i % styles.len()]))
            .collect();
        if absolute {
            words[0] = format!("/usr/bin/{}", words[0]);
        }
        let variant = format!("{prefix}{}", words.join(" "));
        let found = detect(&variant).keys();
        for key in &expected {
            prop_assert!(found.contains(key), "{variant:?} lost {key}: {found:?}");
        }
    }
}
