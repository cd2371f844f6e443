//! What the webhook receiver's answers leave behind, reached through the
//! session manager so the adapter never holds storage: a record per
//! delivery with its attempts, and the comment a pull request's answers
//! are edited into.

use crate::store::{Store, StoreError};

use super::SessionManager;

/// The records of answers delivered to webhook routes' targets.
#[derive(Clone, Debug)]
pub struct Deliveries {
    store: Store,
}

impl Deliveries {
    /// Starts the record of a delivery of route `route`'s answer about
    /// `entity` to `target`; its id, for [`Deliveries::attempt`].
    pub async fn start(&self, route: &str, entity: &str, target: &str) -> Result<i64, StoreError> {
        self.store.delivery_start(route, entity, target).await
    }

    /// Records an attempt of delivery `id`: delivered (no error), or
    /// failed, for good when `last`.
    pub async fn attempt(
        &self,
        id: i64,
        error: Option<&str>,
        last: bool,
    ) -> Result<(), StoreError> {
        self.store.delivery_attempt(id, error, last).await
    }

    /// The comment the gateway's answers about `entity` are written in.
    pub async fn comment(&self, entity: &str) -> Result<Option<String>, StoreError> {
        self.store.bot_comment(entity).await
    }

    /// Remembers `comment` as the one answers about `entity` go into.
    pub async fn set_comment(&self, entity: &str, comment: &str) -> Result<(), StoreError> {
        self.store.set_bot_comment(entity, comment).await
    }
}

impl SessionManager {
    /// Where webhook deliveries are recorded.
    pub fn deliveries(&self) -> Deliveries {
        Deliveries {
            store: self.inner.store.clone(),
        }
    }
}
