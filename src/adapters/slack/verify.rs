//! Slack request signing (v0): `X-Slack-Signature: v0=<hex HMAC-SHA256 of
//! "v0:<timestamp>:<body>">` under the signing secret, with
//! `X-Slack-Request-Timestamp` no more than five minutes from now. Compared
//! in constant time.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

use crate::adapters::signing::{TOLERANCE_SECS, VerifyError, hex_hmac};

fn base(timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut base = Vec::with_capacity(body.len() + 24);
    base.extend_from_slice(b"v0:");
    base.extend_from_slice(timestamp.as_bytes());
    base.push(b':');
    base.extend_from_slice(body);
    base
}

/// Checks a request from Slack; `now` is the current Unix time in seconds.
pub fn verify(secret: &str, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), VerifyError> {
    let header = |name: &'static str| {
        headers
            .get(name)
            .ok_or(VerifyError::Missing(name))?
            .to_str()
            .map_err(|_| VerifyError::Malformed(name))
    };
    let ts = header("x-slack-request-timestamp")?.trim();
    let signature = header("x-slack-signature")?;
    let when: i64 = ts
        .parse()
        .map_err(|_| VerifyError::Malformed("x-slack-request-timestamp"))?;
    if (now - when).abs() > TOLERANCE_SECS {
        return Err(VerifyError::Stale);
    }
    let given = signature
        .strip_prefix("v0=")
        .ok_or(VerifyError::Malformed("x-slack-signature"))?;
    let expected = hex_hmac(secret.as_bytes(), &base(ts, body));
    if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// The `X-Slack-Signature` value Slack would send.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let base = base(&timestamp.to_string(), body);
    format!("v0={}", hex_hmac(secret.as_bytes(), &base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    // The example in Slack's "Verifying requests from Slack" guide.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const TS: i64 = 1_531_420_618;
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "x-slack-request-timestamp",
            HeaderValue::from_str(ts).unwrap(),
        );
        h.insert("x-slack-signature", HeaderValue::from_str(sig).unwrap());
        h
    }

    #[test]
    fn slacks_documented_example_verifies() {
        assert_eq!(sign(SECRET, TS, BODY.as_bytes()), SIGNATURE);
        let h = headers(&TS.to_string(), SIGNATURE);
        assert_eq!(verify(SECRET, &h, BODY.as_bytes(), TS + 60), Ok(()));
    }

    #[test]
    fn wrong_stale_and_missing_are_refused() {
        let h = headers(&TS.to_string(), SIGNATURE);
        assert_eq!(
            verify("other secret", &h, BODY.as_bytes(), TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, &h, BODY.as_bytes(), TS + TOLERANCE_SECS + 1),
            Err(VerifyError::Stale)
        );
        assert_eq!(
            verify(SECRET, &HeaderMap::new(), BODY.as_bytes(), TS),
            Err(VerifyError::Missing("x-slack-request-timestamp"))
        );
        let bad = headers(&TS.to_string(), "v1=abc");
        assert!(matches!(
            verify(SECRET, &bad, BODY.as_bytes(), TS),
            Err(VerifyError::Malformed(_))
        ));
    }
}
