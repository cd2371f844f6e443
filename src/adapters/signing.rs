//! Shared pieces of request signing: HMAC-SHA256 and the errors and time
//! window the webhook receiver and the Slack adapter both use.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Accepted distance between a Standard Webhooks timestamp and now.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A required header is absent.
    #[error("missing {0} header")]
    Missing(&'static str),
    /// The header is not in the scheme's format.
    #[error("malformed {0} header")]
    Malformed(&'static str),
    /// The signature or token does not match.
    #[error("signature mismatch")]
    Mismatch,
    /// The Standard Webhooks timestamp is outside the 5-minute window.
    #[error("timestamp outside the 5-minute window")]
    Stale,
}

/// An HMAC-SHA256 keyed with `key` (any length).
pub fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"))
}

/// Hex HMAC-SHA256 of `body` under `key`.
pub fn hex_hmac(key: &[u8], body: &[u8]) -> String {
    let mut m = mac(key);
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}
