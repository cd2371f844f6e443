//! Files a fake platform serves for download (Discord's CDN, Slack's
//! private file URLs), each download recorded with its `Authorization`
//! header. A fake mounts [`Files::router`] beside its API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

#[derive(Default)]
struct Inner {
    served: HashMap<String, Vec<u8>>,
    fetched: Vec<(String, String)>,
    /// The `Authorization` a download must carry (Slack's bot token).
    required: Option<String>,
}

/// The files of one fake.
#[derive(Clone, Default)]
pub struct Files(Arc<Mutex<Inner>>);

impl Files {
    /// Files whose downloads must carry `authorization` (else 403, as
    /// Slack refuses a private URL without the token).
    pub fn requiring(authorization: &str) -> Self {
        let files = Self::default();
        files.0.lock().unwrap().required = Some(authorization.into());
        files
    }

    /// Serves `bytes` at `path` (under the router's mount point).
    pub fn serve(&self, path: &str, bytes: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .served
            .insert(path.into(), bytes.to_vec());
    }

    /// Each download so far: its path and `Authorization` header.
    pub fn fetched(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().fetched.clone()
    }

    /// `GET /{*path}` for the files served.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/{*path}", get(download))
            .with_state(self.clone())
    }
}

async fn download(
    State(files): State<Files>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let auth = super::authorization(&headers);
    let mut inner = files.0.lock().unwrap();
    inner.fetched.push((path.clone(), auth.clone()));
    if inner.required.as_ref().is_some_and(|r| *r != auth) {
        return (StatusCode::FORBIDDEN, "<html>sign in</html>").into_response();
    }
    match inner.served.get(&path) {
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
