//! Request authentication for the webhook schemes: GitHub
//! (`X-Hub-Signature-256`), GitLab (`X-Gitlab-Token`), a generic hex
//! HMAC-SHA256 header, and Standard Webhooks (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`, 5-minute window). Every
//! comparison is constant time.

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::Mac;
use subtle::ConstantTimeEq;

use crate::config::SignatureScheme;

use crate::adapters::signing::mac;
pub use crate::adapters::signing::{TOLERANCE_SECS, VerifyError, hex_hmac};

/// How a route checks its requests.
#[derive(Clone)]
pub struct Verifier {
    scheme: SignatureScheme,
    secret: Option<Vec<u8>>,
    header: Option<String>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("signed", &self.secret.is_some())
            .finish()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::Missing(name))?;
    value.to_str().map_err(|_| VerifyError::Malformed(name))
}

impl Verifier {
    /// A verifier for `scheme` with `secret` (`None`: an insecure route
    /// that accepts everything). `header` names the `hmac` scheme's header.
    pub fn new(scheme: SignatureScheme, secret: Option<&str>, header: Option<&str>) -> Self {
        let secret = secret.map(|s| match scheme {
            // Standard Webhooks secrets are `whsec_<base64>`; a bare value is
            // used as is.
            SignatureScheme::StandardWebhooks => s
                .strip_prefix("whsec_")
                .and_then(|b| STANDARD.decode(b).ok())
                .unwrap_or_else(|| s.as_bytes().to_vec()),
            _ => s.as_bytes().to_vec(),
        });
        Self {
            scheme,
            secret,
            header: header.map(str::to_string),
        }
    }

    /// Checks one request; `now` is the current Unix time in seconds.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), VerifyError> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        match self.scheme {
            SignatureScheme::Github => {
                let name = "x-hub-signature-256";
                let value = header(headers, name)?;
                let hex = value
                    .strip_prefix("sha256=")
                    .ok_or(VerifyError::Malformed(name))?;
                check_hex_hmac(secret, body, hex, name)
            }
            SignatureScheme::Hmac => {
                let name: &'static str = "signature header";
                let value = self
                    .header
                    .as_deref()
                    .and_then(|h| headers.get(h))
                    .ok_or(VerifyError::Missing(name))?
                    .to_str()
                    .map_err(|_| VerifyError::Malformed(name))?;
                let hex = value.strip_prefix("sha256=").unwrap_or(value);
                check_hex_hmac(secret, body, hex, name)
            }
            SignatureScheme::Gitlab => {
                let token = header(headers, "x-gitlab-token")?;
                if bool::from(token.as_bytes().ct_eq(secret)) {
                    Ok(())
                } else {
                    Err(VerifyError::Mismatch)
                }
            }
            SignatureScheme::StandardWebhooks => {
                let id = header(headers, "webhook-id")?;
                let ts = header(headers, "webhook-timestamp")?;
                let sigs = header(headers, "webhook-signature")?;
                let when: i64 = ts
                    .trim()
                    .parse()
                    .map_err(|_| VerifyError::Malformed("webhook-timestamp"))?;
                if (now - when).abs() > TOLERANCE_SECS {
                    return Err(VerifyError::Stale);
                }
                let mut m = mac(secret);
                m.update(id.as_bytes());
                m.update(b".");
                m.update(ts.trim().as_bytes());
                m.update(b".");
                m.update(body);
                let expected = m.finalize().into_bytes();
                let matched = sigs
                    .split_whitespace()
                    .filter_map(|s| s.strip_prefix("v1,"))
                    .filter_map(|b| STANDARD.decode(b).ok())
                    .any(|sig| bool::from(sig.as_slice().ct_eq(&expected[..])));
                if matched {
                    Ok(())
                } else {
                    Err(VerifyError::Mismatch)
                }
            }
        }
    }
}

fn check_hex_hmac(
    secret: &[u8],
    body: &[u8],
    hex_sig: &str,
    name: &'static str,
) -> Result<(), VerifyError> {
    let sig = hex::decode(hex_sig.trim()).map_err(|_| VerifyError::Malformed(name))?;
    let mut m = mac(secret);
    m.update(body);
    m.verify_slice(&sig).map_err(|_| VerifyError::Mismatch)
}

/// `sha256=<hex>` of `body` under `secret`, as GitHub sends it.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex_hmac(secret.as_bytes(), body))
}

/// The Standard Webhooks `webhook-signature` value for a message.
pub fn standard_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = secret
        .strip_prefix("whsec_")
        .and_then(|b| STANDARD.decode(b).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec());
    let mut m = mac(&key);
    m.update(format!("{id}.{timestamp}.").as_bytes());
    m.update(body);
    format!("v1,{}", STANDARD.encode(m.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn github_documented_test_vector() {
        // docs.github.com, "Validating webhook deliveries": secret
        // "It's a Secret to Everybody", payload "Hello, World!".
        let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            github_signature("It's a Secret to Everybody", b"Hello, World!"),
            expected
        );
        let v = Verifier::new(
            SignatureScheme::Github,
            Some("It's a Secret to Everybody"),
            None,
        );
        let h = headers(&[("x-hub-signature-256", expected)]);
        assert_eq!(v.verify(&h, b"Hello, World!", 0), Ok(()));
        assert_eq!(
            v.verify(&h, b"Hello, World?", 0),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            v.verify(&HeaderMap::new(), b"Hello, World!", 0),
            Err(VerifyError::Missing("x-hub-signature-256"))
        );
        let bad = headers(&[("x-hub-signature-256", "sha1=abc")]);
        assert!(matches!(
            v.verify(&bad, b"x", 0),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn standard_webhooks_reference_vector_and_window() {
        // The Standard Webhooks reference libraries' test message.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let ts = 1_614_265_330;
        let sig = standard_signature(secret, id, ts, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let v = Verifier::new(SignatureScheme::StandardWebhooks, Some(secret), None);
        let ts_s = ts.to_string();
        let multi = format!("v1,bm90IGl0 {sig}");
        let h = headers(&[
            ("webhook-id", id),
            ("webhook-timestamp", &ts_s),
            ("webhook-signature", &multi),
        ]);
        assert_eq!(v.verify(&h, body, ts + 10), Ok(()));
        assert_eq!(
            v.verify(&h, body, ts + TOLERANCE_SECS + 1),
            Err(VerifyError::Stale)
        );
        assert_eq!(
            v.verify(&h, body, ts - TOLERANCE_SECS - 1),
            Err(VerifyError::Stale)
        );
        assert_eq!(v.verify(&h, b"{}", ts), Err(VerifyError::Mismatch));
    }

    #[test]
    fn gitlab_token_and_generic_hmac() {
        let v = Verifier::new(SignatureScheme::Gitlab, Some("tok"), None);
        assert_eq!(
            v.verify(&headers(&[("x-gitlab-token", "tok")]), b"", 0),
            Ok(())
        );
        assert_eq!(
            v.verify(&headers(&[("x-gitlab-token", "tok2")]), b"", 0),
            Err(VerifyError::Mismatch)
        );
        let v = Verifier::new(SignatureScheme::Hmac, Some("k"), Some("X-Sig"));
        let sig = hex_hmac(b"k", b"body");
        assert_eq!(v.verify(&headers(&[("x-sig", &sig)]), b"body", 0), Ok(()));
        assert_eq!(
            v.verify(&headers(&[("x-sig", &sig)]), b"other", 0),
            Err(VerifyError::Mismatch)
        );
        let open = Verifier::new(SignatureScheme::Hmac, None, Some("X-Sig"));
        assert_eq!(open.verify(&HeaderMap::new(), b"x", 0), Ok(()));
    }
}
