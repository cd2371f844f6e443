//! Readiness of the long-lived components (adapters, MCP servers), as shown
//! by `/readyz`. Components report; the HTTP layer reads.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

/// The state one component last reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentHealth {
    /// Whether the component can do its work now.
    pub ready: bool,
    /// Short human explanation (`connected`, `reconnecting: 502 from …`).
    pub detail: String,
}

/// Shared registry of component states; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Health {
    inner: Arc<RwLock<BTreeMap<String, ComponentHealth>>>,
}

impl Health {
    /// Records a component's state, replacing the previous one.
    pub fn set(&self, component: &str, ready: bool, detail: impl Into<String>) {
        let state = ComponentHealth {
            ready,
            detail: detail.into(),
        };
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        map.insert(component.to_string(), state);
    }

    /// Forgets a component (it was stopped on purpose).
    pub fn remove(&self, component: &str) {
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        map.remove(component);
    }

    /// Every component's state, sorted by name.
    pub fn snapshot(&self) -> BTreeMap<String, ComponentHealth> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
