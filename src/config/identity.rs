//! A person named in the configuration is `platform:id` — `telegram:123`,
//! `discord:…`, `slack:U…`, `github:login`, `gitlab:user`, `cli:user` (the
//! person at the terminal of `switchboard chat --user user`) — and matches
//! only that platform's user: a Slack user id and a GitHub login that
//! happen to be spelled alike are different people.

/// The platforms a person can be named on.
pub const PLATFORMS: &[&str] = &["telegram", "discord", "slack", "github", "gitlab", "cli"];

/// Why `value` is not a qualified identity, with the form to write; `hint`
/// is the platform the key is usually about (a route's forge). The error
/// is a sentence for `check`'s list of problems (the caller adds the key);
/// nothing matches on it, so it stays text.
pub fn check(value: &str, hint: Option<&str>) -> Result<(), String> {
    let shown = |platform: &str| format!("\"{platform}:{}\"", value.trim_start_matches('@'));
    match value.split_once(':') {
        Some((platform, id)) if PLATFORMS.contains(&platform) => {
            if id.trim_start_matches('@').trim().is_empty() {
                Err(format!("{value:?} names no user after the platform"))
            } else {
                Ok(())
            }
        }
        Some((platform, _)) => Err(format!(
            "{value:?}: unknown platform {platform:?}; one of {}",
            PLATFORMS.join(", ")
        )),
        None => Err(format!(
            "{value:?} is not qualified: write {} (a bare id would match that id on every platform)",
            match hint {
                Some(platform) => shown(platform),
                None => PLATFORMS
                    .iter()
                    .map(|p| shown(p))
                    .collect::<Vec<_>>()
                    .join(" or "),
            }
        )),
    }
}

/// Whether the qualified identity `listed` names user `id` of `platform`
/// (forge logins compare without case and without a leading `@`).
pub fn names(listed: &str, platform: &str, id: &str) -> bool {
    let Some((listed_platform, listed_id)) = listed.split_once(':') else {
        return false;
    };
    if listed_platform != platform {
        return false;
    }
    match platform {
        "github" | "gitlab" => listed_id
            .trim_start_matches('@')
            .eq_ignore_ascii_case(id.trim_start_matches('@')),
        _ => listed_id == id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_platform_matches() {
        assert!(names("slack:U024BE7LH", "slack", "U024BE7LH"));
        assert!(!names("slack:U024BE7LH", "github", "U024BE7LH"));
        assert!(!names("U024BE7LH", "github", "U024BE7LH"));
        assert!(names("github:@Octo-Admin", "github", "octo-admin"));
        assert!(!names("telegram:12", "telegram", "123"));
    }

    #[test]
    fn bare_and_unknown_ids_are_refused_with_the_form_to_write() {
        let bare = check("U024BE7LH", None).unwrap_err();
        assert!(bare.contains("\"slack:U024BE7LH\""), "{bare}");
        let hinted = check("@alice", Some("github")).unwrap_err();
        assert!(hinted.contains("write \"github:alice\""), "{hinted}");
        assert!(check("irc:bob", None).is_err());
        assert!(check("github:", None).is_err());
        assert!(check("gitlab:ann", None).is_ok());
    }
}
