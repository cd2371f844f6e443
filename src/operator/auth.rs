//! Logging in to the console: the token (compared in constant time, as
//! hashes, so neither its bytes nor its length leak), the session cookie,
//! the per-login CSRF token, logging out, and the extractor every page and
//! action goes through.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Console, pages};

/// The session cookie's name.
const COOKIE: &str = "sb_console";
/// Wrong tokens a client address may send before it must wait.
const FREE_TRIES: u32 = 5;
/// The longest a client address waits after wrong tokens.
const LONGEST_WAIT: Duration = Duration::from_secs(15 * 60);
/// Client addresses whose wrong tries are remembered at once.
const REMEMBERED: usize = 10_000;

/// Wrong tokens from one client address.
struct Tries {
    wrong: u32,
    until: Instant,
}

struct Login {
    csrf: String,
    until: Instant,
}

/// The console's logins.
pub(super) struct Logins {
    token: [u8; 32],
    secure: bool,
    lasts: Duration,
    open: Mutex<HashMap<String, Login>>,
    /// Per client address: never one lockout for everyone, so a stranger
    /// who can reach the port cannot lock the operator out.
    tries: Mutex<HashMap<IpAddr, Tries>>,
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

impl Logins {
    pub(super) fn new(token: SecretString, secure: bool, hours: u64) -> Self {
        Self::lasting(token, secure, Duration::from_secs(hours * 3600))
    }

    fn lasting(token: SecretString, secure: bool, lasts: Duration) -> Self {
        Self {
            token: digest(token.expose_secret().as_bytes()),
            secure,
            lasts,
            open: Mutex::new(HashMap::new()),
            tries: Mutex::new(HashMap::new()),
        }
    }

    /// How long `client` must still wait before its next try.
    fn waiting(&self, client: IpAddr) -> Option<Duration> {
        let tries = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        let left = tries
            .get(&client)?
            .until
            .checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// Records a wrong token from `client`: past [`FREE_TRIES`] it waits,
    /// twice as long after each (1 s, 2 s, 4 s … up to [`LONGEST_WAIT`]).
    fn wrong(&self, client: IpAddr) {
        let mut tries = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if tries.len() >= REMEMBERED {
            tries.retain(|_, t| t.until > now);
            if tries.len() >= REMEMBERED {
                tries.clear();
            }
        }
        let entry = tries.entry(client).or_insert(Tries {
            wrong: 0,
            until: now,
        });
        entry.wrong += 1;
        if entry.wrong >= FREE_TRIES {
            let doubling = (entry.wrong - FREE_TRIES).min(20);
            let wait = Duration::from_secs(1u64 << doubling).min(LONGEST_WAIT);
            entry.until = now + wait;
        }
    }

    /// A right token from `client` forgets its wrong ones.
    fn right(&self, client: IpAddr) {
        self.tries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&client);
    }

    /// Opens a login; its session id.
    fn admit(&self) -> String {
        let sid = random_hex();
        self.open().insert(
            sid.clone(),
            Login {
                csrf: random_hex(),
                until: Instant::now() + self.lasts,
            },
        );
        sid
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<String, Login>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CSRF token of live login `sid`.
    fn csrf_of(&self, sid: &str) -> Option<String> {
        let mut open = self.open();
        let now = Instant::now();
        open.retain(|_, l| l.until > now);
        open.get(sid).map(|l| l.csrf.clone())
    }

    fn cookie(&self, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        ))
        .unwrap_or_else(|_| HeaderValue::from_static("sb_console=; Max-Age=0"))
    }
}

/// The login cookie's value in `headers`.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then(|| value.to_string())
        })
}

/// A logged-in operator.
pub(super) struct Operator {
    sid: String,
    /// The token every form carries back.
    pub(super) csrf: String,
}

impl Operator {
    /// Whether `given` is this login's CSRF token.
    pub(super) fn vouches(&self, given: &str) -> bool {
        bool::from(digest(self.csrf.as_bytes()).ct_eq(&digest(given.as_bytes())))
    }
}

impl FromRequestParts<Console> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Console) -> Result<Self, Response> {
        let sid = session_id(&parts.headers);
        match sid.and_then(|sid| state.logins.csrf_of(&sid).map(|csrf| (sid, csrf))) {
            Some((sid, csrf)) => Ok(Self { sid, csrf }),
            None if parts.method == axum::http::Method::GET => {
                Err(Redirect::to("/login").into_response())
            }
            None => Err((StatusCode::FORBIDDEN, "log in first").into_response()),
        }
    }
}

/// Why the last login was refused (`/login?refused=…`).
#[derive(serde::Deserialize, Default)]
pub(super) struct Refused {
    refused: Option<String>,
}

/// `GET /login`.
pub(super) async fn login_page(axum::extract::Query(q): axum::extract::Query<Refused>) -> Response {
    let why = match q.refused.as_deref() {
        Some("wait") => Some("Too many wrong tokens from here; wait a little and try again."),
        Some(_) => Some("That token is not the console's."),
        None => None,
    };
    pages::login(why).into_response()
}

/// The login form.
#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
}

/// `POST /login`: the token for a session cookie.
pub(super) async fn login(
    State(console): State<Console>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let logins = &console.logins;
    let store = &console.state.store;
    let client = client.map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.0.ip());
    if logins.waiting(client).is_some() {
        audit(store, "login", "", "refused: too many tries").await;
        return Redirect::to("/login?refused=wait").into_response();
    }
    let right = bool::from(digest(form.token.trim().as_bytes()).ct_eq(&logins.token));
    if !right {
        logins.wrong(client);
        tracing::warn!("console login refused: wrong token");
        audit(store, "login", "", "refused: wrong token").await;
        // Back to the form with why (a page, not an error, in the browser).
        return Redirect::to("/login?refused=token").into_response();
    }
    logins.right(client);
    let sid = logins.admit();
    audit(store, "login", "", "ok").await;
    let mut response = Redirect::to("/").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        logins.cookie(&sid, logins.lasts.as_secs()),
    );
    response
}

/// A form that carries only the CSRF token.
#[derive(serde::Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

impl CsrfForm {
    /// The token given.
    pub(super) fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /logout`.
pub(super) async fn logout(
    State(console): State<Console>,
    operator: Operator,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if !operator.vouches(form.csrf()) {
        return refused_csrf(&console, "logout").await;
    }
    console.logins.open().remove(&operator.sid);
    audit(&console.state.store, "logout", "", "ok").await;
    let mut response = Redirect::to("/login").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, console.logins.cookie("", 0));
    response
}

/// The answer to an action without its login's CSRF token.
pub(super) async fn refused_csrf(console: &Console, action: &str) -> Response {
    tracing::warn!(action, "console action refused: no valid CSRF token");
    audit(
        &console.state.store,
        action,
        "",
        "refused: no valid CSRF token",
    )
    .await;
    (
        StatusCode::FORBIDDEN,
        "refused: the form's CSRF token is missing or wrong; reload the page",
    )
        .into_response()
}

/// Records a console action (and logs it when storage refuses).
pub(super) async fn audit(store: &crate::store::Store, action: &str, target: &str, outcome: &str) {
    tracing::info!(actor = "console", action, target, outcome, "console action");
    if let Err(err) = store
        .console_audit("console", action, target, outcome)
        .await
    {
        tracing::warn!(error = %err, action, "console action not recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_expire_and_cookies_are_secure_behind_https() {
        let token = || SecretString::new("t".into());
        let brief = Logins::lasting(token(), false, Duration::ZERO);
        let sid = brief.admit();
        assert_eq!(brief.csrf_of(&sid), None, "expired at once");
        let day = Logins::lasting(token(), true, Duration::from_secs(3600));
        let sid = day.admit();
        assert!(day.csrf_of(&sid).is_some_and(|c| c.len() == 64));
        assert_eq!(day.csrf_of("forged"), None);
        let cookie = day.cookie(&sid, 3600);
        let cookie = cookie.to_str().unwrap();
        assert!(
            cookie.ends_with("; Secure") && cookie.contains("HttpOnly; SameSite=Strict"),
            "{cookie}"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={sid}")).unwrap(),
        );
        assert_eq!(session_id(&headers), Some(sid));
    }
}
