//! The environment a configuration reads its secrets and overrides from.

use std::collections::BTreeMap;

/// A snapshot of the process environment (or a test's stand-in for it).
///
/// Secrets are looked up here by the names the config gives; an empty value
/// counts as unset.
#[derive(Clone, Default)]
pub struct Env(BTreeMap<String, String>);

/// Names only: the values may be secrets.
impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Env {
    /// The value of `name` as a secret: kept out of every Debug output.
    pub fn secret(&self, name: &str) -> Option<secrecy::SecretString> {
        self.get(name)
            .map(|v| secrecy::SecretString::new(v.to_string()))
    }

    /// The current process environment.
    pub fn from_process() -> Self {
        Self(std::env::vars().collect())
    }

    /// An environment made of the given pairs only.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// The value of `name`, if set and non-empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The configuration overrides: `<prefix><SECTION>__<KEY>…`. A name
    /// without the `__` separator (`SWITCHBOARD_CONSOLE_TOKEN`, a secret a
    /// `*_env` key names) is never read as one.
    pub(super) fn overrides(&self, prefix: &str) -> config::Map<String, String> {
        self.0
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(prefix)
                    .is_some_and(|rest| rest.contains("__"))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
