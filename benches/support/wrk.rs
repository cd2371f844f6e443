//! The bench's load client, working as wrk does, so the figures measure
//! the server rather than the client on its cores: every request (body,
//! signature, headers) is written out before the clock starts, and each
//! connection writes one on a kept-alive socket, reads the status line and
//! the body its `Content-Length` gives, and writes the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use switchboard::adapters::webhook::verify::github_signature;

use super::{SECRET, body};

/// One run's rate and latencies, and how many deliveries were answered 202.
#[derive(Clone, Copy)]
pub struct Run {
    pub rate: f64,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub accepted: usize,
}

/// `requests` distinct signed deliveries (numbered from `offset`) spread
/// over `prs` pull requests, posted to `url` from `connections` clients.
pub async fn load(
    url: String,
    offset: usize,
    requests: usize,
    connections: usize,
    prs: usize,
) -> Run {
    load_across(vec![url], offset, requests, connections, prs).await
}

/// [`load`] with the deliveries spread over `urls` in turn.
pub async fn load_across(
    urls: Vec<String>,
    offset: usize,
    requests: usize,
    connections: usize,
    prs: usize,
) -> Run {
    let targets: Vec<(String, String)> = urls.iter().map(|u| split_url(u)).collect();
    let wire: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..requests)
            .map(|i| {
                let (host, path) = &targets[i % targets.len()];
                request_bytes(host, path, offset + i, (offset + i) % prs + 1)
            })
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let hosts: Arc<Vec<String>> = Arc::new(targets.into_iter().map(|(h, _)| h).collect());
    let mut streams = Vec::new();
    for _ in 0..connections {
        let mut each = Vec::new();
        for host in hosts.iter() {
            let stream = tokio::net::TcpStream::connect(host).await.unwrap();
            stream.set_nodelay(true).unwrap();
            each.push(stream);
        }
        streams.push(each);
    }
    let began = Instant::now();
    for mut each in streams {
        let (wire, next, accepted, hosts) =
            (wire.clone(), next.clone(), accepted.clone(), hosts.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut buf = Vec::with_capacity(4096);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return latencies;
                }
                let n = each.len();
                let stream = &mut each[i % n];
                let start = Instant::now();
                let status = exchange(stream, &wire[i], &mut buf).await;
                latencies.push(start.elapsed());
                match status {
                    Some(status) if status == StatusCode::ACCEPTED.as_u16() => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => {}
                    // A connection that failed is made again; the delivery
                    // counts as not accepted, which the caller asserts.
                    None => {
                        *stream = tokio::net::TcpStream::connect(&hosts[i % n]).await.unwrap();
                        stream.set_nodelay(true).unwrap();
                    }
                }
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = began.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Run {
        rate: requests as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        max: all[all.len() - 1],
        accepted: accepted.load(Ordering::Relaxed),
    }
}

/// `http://host:port/path` as its `host:port` and `/path`.
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("a plain http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (host.to_string(), path.to_string())
}

/// Delivery `n` for pull request `pr`, signed, as the bytes of an HTTP/1.1
/// request on a kept-alive connection.
fn request_bytes(host: &str, path: &str, n: usize, pr: usize) -> Vec<u8> {
    let body = body(n, pr);
    let sig = github_signature(SECRET, &body);
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\nx-github-event: pull_request\r\n\
         x-github-delivery: bench-{n}\r\nx-hub-signature-256: {sig}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Writes `request` and reads its answer's head and `Content-Length`
/// bytes of body: its status, or `None` when the connection failed.
async fn exchange(
    stream: &mut tokio::net::TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request).await.ok()?;
    buf.clear();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut head = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(len) = head.parse(buf).ok()? {
            let body = head
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0usize);
            let status = head.code?;
            assert!(
                !head
                    .headers
                    .iter()
                    .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding")),
                "answers are read by their Content-Length"
            );
            while buf.len() < len + body {
                if stream.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            }
            return Some(status);
        }
        if stream.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}
