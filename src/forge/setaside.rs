//! Findings set aside on a change: a thread of the bot's that the change's
//! author or someone trusted resolved, or answered "won't fix". A later
//! finding that makes the same point (reworded at most, on the same file,
//! no more severe) is not posted again; it still gates unless one of the
//! route's approvers other than the author declined it.

use super::findings::{self, Finding};
use super::host::{Dismissed, SetAside};
use super::settings::normal;
use super::{Forge, Scope};

/// A review's findings, those set aside taken out.
pub(super) struct Sifted {
    /// Not set aside: posted.
    pub kept: Vec<Finding>,
    /// Set aside, but still gating.
    pub gating: Vec<Finding>,
    /// How many were set aside.
    pub set_aside: usize,
}

impl Forge {
    /// The threads among `own` (the bot's comments on `entity`) that the
    /// change's author or someone trusted set aside (none when that cannot
    /// be read).
    pub(super) async fn dismissed(
        &self,
        scope: &Scope,
        entity: &str,
        own: &[String],
    ) -> Vec<Dismissed> {
        if own.is_empty() {
            return Vec::new();
        }
        match self.host.dismissed(scope, own).await {
            Ok(all) => all
                .into_iter()
                .filter(|d| scope.by_author(&d.by.login) || self.trusts(&d.by))
                .collect(),
            Err(err) => {
                tracing::warn!(route = %self.route, entity, error = %err, "the threads set aside could not be read");
                Vec::new()
            }
        }
    }

    /// `found` with the points `dismissed` set aside taken out.
    pub(super) fn sift(
        &self,
        scope: &Scope,
        found: Vec<Finding>,
        dismissed: &[Dismissed],
    ) -> Sifted {
        let mut sifted = Sifted {
            kept: Vec::new(),
            gating: Vec::new(),
            set_aside: 0,
        };
        for f in found {
            let mut matching = dismissed.iter().filter(|d| {
                normal(&d.path) == normal(&f.path)
                    && findings::severity_in(&d.said).is_some_and(|was| f.severity <= was)
                    && findings::same_point(findings::said_in(&d.said), &f.body)
            });
            let Some(first) = matching.next() else {
                sifted.kept.push(f);
                continue;
            };
            sifted.set_aside += 1;
            let lifted = std::iter::once(first).chain(matching).any(|d| {
                d.how == SetAside::Declined && self.approves(&d.by) && !scope.by_author(&d.by.login)
            });
            if !lifted {
                sifted.gating.push(f);
            }
        }
        sifted
    }
}
