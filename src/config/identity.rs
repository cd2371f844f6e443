//! A person named in the configuration is `platform:id` — `telegram:123`,
//! `discord:…`, `slack:U…`, `github:login`, `gitlab:user`, `cli:user` (the
//! person at the terminal of `switchboard chat --user user`) — and matches
//! only that platform's user: a Slack user id and a GitHub login that
//! happen to be spelled alike are different people. On a forge a login can
//! be renamed and then taken by someone else; `github:#583231` (`gitlab:#42`)
//! names the account by its number, which stays with it.

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
            } else if let Some(number) = id.trim_start_matches('@').strip_prefix('#') {
                match platform {
                    "github" | "gitlab" if number.parse::<u64>().is_ok() => Ok(()),
                    "github" | "gitlab" => Err(format!(
                        "{value:?}: an account number is digits ({platform}:#583231)"
                    )),
                    _ => Err(format!(
                        "{value:?}: only a forge's accounts are named by number (github:#…, gitlab:#…)"
                    )),
                }
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

/// Whether the qualified identity `listed` names user `id` of `platform`,
/// whose forge account number is `account` when the event gave it (forge
/// logins compare without case and without a leading `@`; `#…` compares
/// the number, and names no one whose number is not known).
pub fn names(listed: &str, platform: &str, id: &str, account: Option<u64>) -> bool {
    let Some((listed_platform, listed_id)) = listed.split_once(':') else {
        return false;
    };
    if listed_platform != platform {
        return false;
    }
    match platform {
        "github" | "gitlab" => match listed_id.trim_start_matches('@').strip_prefix('#') {
            Some(number) => account.is_some_and(|a| number.parse() == Ok(a)),
            None => listed_id
                .trim_start_matches('@')
                .eq_ignore_ascii_case(id.trim_start_matches('@')),
        },
        _ => listed_id == id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_platform_matches() {
        assert!(names("slack:U024BE7LH", "slack", "U024BE7LH", None));
        assert!(!names("slack:U024BE7LH", "github", "U024BE7LH", None));
        assert!(!names("U024BE7LH", "github", "U024BE7LH", None));
        assert!(names("github:@Octo-Admin", "github", "octo-admin", None));
        assert!(!names("telegram:12", "telegram", "123", None));
    }

    #[test]
    fn a_forge_account_named_by_number_matches_its_number_not_its_login() {
        assert!(names("github:#583231", "github", "octocat", Some(583231)));
        // The login it had, now someone else's account.
        assert!(!names("github:#583231", "github", "octocat", Some(9)));
        assert!(!names("github:#583231", "github", "#583231", None));
        assert!(!names("gitlab:#583231", "github", "x", Some(583231)));
        assert!(names("gitlab:#42", "gitlab", "ann", Some(42)));
        assert!(check("github:#583231", None).is_ok());
        assert!(check("github:#octocat", None).is_err());
        assert!(check("github:@#x", None).is_err());
        assert!(names("github:@#7", "github", "x", Some(7)));
        assert!(check("slack:#U024BE7LH", None).is_err());
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
