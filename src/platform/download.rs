//! Saving a platform's file to disk over plain HTTP, for ports whose files
//! are links (Discord's CDN, Slack's private URLs): streamed, capped, and
//! with the platform's answers mapped to [`PlatformError`].

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::PlatformError;

/// Largest file a port downloads, whatever it is for: bigger ones are
/// refused part way, and what was written is removed.
pub const MAX_DOWNLOAD_BYTES: u64 = 50 * 1024 * 1024;

/// Saves what `request` answers as `path`; refuses (and removes) a body
/// longer than [`MAX_DOWNLOAD_BYTES`].
pub async fn download(
    request: reqwest::RequestBuilder,
    path: PathBuf,
) -> Result<PathBuf, PlatformError> {
    let unavailable = |e: &dyn std::fmt::Display| PlatformError::Unavailable(e.to_string());
    let response = request.send().await.map_err(|e| unavailable(&e))?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        return Err(match status.as_u16() {
            404 | 410 => PlatformError::NotFound(format!("file answered {status}")),
            429 => PlatformError::RateLimited {
                retry_after: Duration::from_secs(retry_after.unwrap_or(1)),
            },
            500.. => PlatformError::Unavailable(format!("file answered {status}")),
            _ => PlatformError::Rejected(format!("file answered {status}")),
        });
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOWNLOAD_BYTES)
    {
        return Err(too_large());
    }
    let mut out = tokio::fs::File::create(&path)
        .await
        .map_err(|e| unavailable(&e))?;
    let written = copy(response, &mut out).await;
    drop(out);
    match written {
        Ok(_) => Ok(path),
        Err(err) => {
            let _ = tokio::fs::remove_file(&path).await;
            Err(err)
        }
    }
}

fn too_large() -> PlatformError {
    PlatformError::Rejected(format!(
        "the file is larger than {} MiB",
        MAX_DOWNLOAD_BYTES >> 20
    ))
}

async fn copy(
    response: reqwest::Response,
    out: &mut tokio::fs::File,
) -> Result<u64, PlatformError> {
    let mut body = response.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| PlatformError::Unavailable(e.to_string()))?;
        written += chunk.len() as u64;
        if written > MAX_DOWNLOAD_BYTES {
            return Err(too_large());
        }
        out.write_all(&chunk)
            .await
            .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
    }
    out.flush()
        .await
        .map_err(|e| PlatformError::Unavailable(e.to_string()))?;
    Ok(written)
}
