//! The one registry of platforms: their profiles (known from the config
//! before anything connects, so a backlog can be replayed and access
//! decided) and the ports of those connected now, attached and detached
//! symmetrically.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::{Platform, PlatformId, Preset, Profile};

/// Profiles and connected ports, by platform id; share it behind an `Arc`.
#[derive(Default)]
pub struct Platforms {
    profiles: RwLock<BTreeMap<PlatformId, Arc<Profile>>>,
    ports: RwLock<BTreeMap<PlatformId, Arc<dyn Platform>>>,
}

impl std::fmt::Debug for Platforms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let described: Vec<PlatformId> = self.profiles().iter().map(|p| p.id.clone()).collect();
        f.debug_struct("Platforms")
            .field("described", &described)
            .field("connected", &self.connected())
            .finish()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl Platforms {
    /// A registry of `profiles`, nothing connected.
    pub fn new(profiles: impl IntoIterator<Item = Profile>) -> Self {
        let this = Self::default();
        for p in profiles {
            this.describe(p);
        }
        this
    }

    /// Records (or replaces) a platform's profile.
    pub fn describe(&self, profile: Profile) {
        write(&self.profiles).insert(profile.id.clone(), Arc::new(profile));
    }

    /// The profile of `id`.
    pub fn profile(&self, id: &str) -> Option<Arc<Profile>> {
        read(&self.profiles).get(id).cloned()
    }

    /// Every profile, by id.
    pub fn profiles(&self) -> Vec<Arc<Profile>> {
        read(&self.profiles).values().cloned().collect()
    }

    /// Every platform's toolset preset, by platform id.
    pub fn presets(&self) -> Vec<(String, Preset)> {
        read(&self.profiles)
            .values()
            .map(|p| (p.id.to_string(), p.preset))
            .collect()
    }

    /// Connects `id`: what goes to its chats goes through `port` until
    /// [`detach`](Self::detach).
    pub fn attach(&self, id: &str, port: Arc<dyn Platform>) {
        write(&self.ports).insert(PlatformId::new(id), port);
    }

    /// Disconnects `id`.
    pub fn detach(&self, id: &str) {
        write(&self.ports).remove(id);
    }

    /// The port of a connected platform.
    pub fn port(&self, id: &str) -> Option<Arc<dyn Platform>> {
        read(&self.ports).get(id).cloned()
    }

    /// The connected platforms.
    pub fn connected(&self) -> Vec<PlatformId> {
        read(&self.ports).keys().cloned().collect()
    }
}
