//! The listener. `axum::serve` sets no limits, so this is the accept loop
//! around hyper's HTTP/1 connection that does: a cap on open connections
//! (extra ones get a 503 and are closed), a deadline for each request head
//! (from the connection's start, or from its first byte after a pause), a
//! deadline for an idle keep-alive connection, and hyper's header count and
//! size limits (431). A slow body is the router's 408, as before.
//!
//! Each connection is watched by one timer that sleeps until the deadline of
//! the phase it is in, so ten thousand quiet connections cost ten thousand
//! timers, not a poll loop.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::config::ServerConfig;
use crate::telemetry::events::{self, ConnectionClosed, ConnectionRefused, OpenConnections};

/// What the listener enforces, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more are refused.
    pub max_connections: usize,
    /// Longest time a request head may take to arrive.
    pub header_read_timeout: Duration,
    /// Longest time a connection may sit between requests; `None` turns
    /// keep-alive off (one request per connection).
    pub keep_alive: Option<Duration>,
    /// Most header lines in one request.
    pub max_headers: usize,
    /// Largest request head (start line and headers), in bytes.
    pub max_header_bytes: usize,
}

impl Limits {
    /// The limits `[server]` sets.
    pub fn from_config(server: &ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            header_read_timeout: Duration::from_secs(server.header_read_timeout_secs),
            keep_alive: (server.keep_alive_secs > 0)
                .then(|| Duration::from_secs(server.keep_alive_secs)),
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
        }
    }
}

/// Refusals in flight at once; past this an extra connection is dropped
/// without an answer rather than cost a task.
const REFUSALS_IN_FLIGHT: usize = 64;
/// How long a refusal may take to be written and the socket to drain.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(2);
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 21\r\n\r\n\
too many connections\n";

/// Serves `app` on `listener` until `stop`, then lets open connections
/// finish the request they are in (new ones are no longer accepted) and
/// returns when they have.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: CancellationToken,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) if is_per_connection(&err) => continue,
            Err(err) => {
                // Out of descriptors, most likely: back off instead of
                // spinning on an accept that keeps failing.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let (app, stop, slots) = (app.clone(), stop.clone(), slots.clone());
                events::emit(OpenConnections(
                    limits.max_connections - slots.available_permits(),
                ));
                connections.spawn(async move {
                    connection(tcp, peer, app, limits, stop).await;
                    drop(slot);
                    events::emit(OpenConnections(
                        limits.max_connections - slots.available_permits(),
                    ));
                });
            }
            Err(_) => {
                events::emit(ConnectionRefused);
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    connections.spawn(async move {
                        let _ = tokio::time::timeout(REFUSAL_DEADLINE, refuse(tcp)).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Errors that concern only the connection being accepted.
fn is_per_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Answers 503 and closes. The client's request is read and discarded
/// until it closes its side, so the close is a FIN, not a reset that could
/// destroy the answer before the client reads it.
async fn refuse(mut tcp: TcpStream) {
    if tcp.write_all(REFUSAL).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 1024];
    while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let _ = tcp.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        tcp,
        activity: activity.clone(),
    });
    let watched = activity.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // Who is asking, for handlers that limit per client.
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let busy = Busy::begin(watched.clone());
        let answer = app.clone().oneshot(request);
        async move {
            let response = answer.await;
            drop(busy);
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // The watch below keeps the head deadline; hyper's own would start
        // at the end of each response and so also cut idle keep-alive.
        .header_read_timeout(None)
        .keep_alive(limits.keep_alive.is_some())
        .max_headers(limits.max_headers)
        .max_header_size(limits.max_header_bytes);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let (phase, since) = activity.load();
        let deadline = match phase {
            // The router's timeout bounds a request; look again later.
            Phase::Busy => Instant::now() + limits.header_read_timeout,
            // A connection told to close may still be writing to a client
            // that does not read: it gets one head timeout, then is dropped.
            _ if closing => since + limits.header_read_timeout,
            _ => since + Activity::allowed(phase, limits),
        };
        tokio::select! {
            _ = &mut conn => return,
            _ = stop.cancelled(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
                activity.restart();
            }
            _ = tokio::time::sleep_until(deadline) => {
                if phase == Phase::Busy || activity.load() != (phase, since) {
                    continue;
                }
                if closing {
                    return;
                }
                if phase == Phase::Head {
                    events::emit(ConnectionClosed { reason: "header_timeout" });
                    return;
                }
                events::emit(ConnectionClosed { reason: "idle" });
                conn.as_mut().graceful_shutdown();
                closing = true;
                activity.restart();
            }
        }
    }
}

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head: a new connection, or bytes arrived
    /// after a pause.
    Head = 0,
    /// A request is being answered; the router's timeout bounds it.
    Busy = 1,
    /// Between requests, nothing received yet.
    Idle = 2,
}

/// The phase a connection is in and since when, shared between its socket
/// (which sees bytes arrive), its service (which sees requests begin and
/// end) and its watch. Both live in one word so they change together:
/// milliseconds after `opened`, shifted left by two, or'd with the phase.
struct Activity {
    opened: Instant,
    state: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            state: AtomicU64::new(Phase::Head as u64),
        }
    }

    fn load(&self) -> (Phase, Instant) {
        let state = self.state.load(Ordering::Acquire);
        let phase = match state & 0b11 {
            0 => Phase::Head,
            1 => Phase::Busy,
            _ => Phase::Idle,
        };
        (phase, self.opened + Duration::from_millis(state >> 2))
    }

    fn phase(&self) -> Phase {
        self.load().0
    }

    fn enter(&self, phase: Phase) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX >> 2);
        self.state
            .store((ms << 2) | phase as u64, Ordering::Release);
    }

    /// The current phase begins again now.
    fn restart(&self) {
        self.enter(self.phase());
    }

    /// How long a connection may stay in `phase`.
    fn allowed(phase: Phase, limits: Limits) -> Duration {
        match phase {
            Phase::Head | Phase::Busy => limits.header_read_timeout,
            Phase::Idle => limits.keep_alive.unwrap_or(limits.header_read_timeout),
        }
    }
}

/// A request in progress on a connection; dropping it (the answer is
/// ready, or the request was abandoned) makes the connection idle.
struct Busy(Arc<Activity>);

impl Busy {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.enter(Phase::Busy);
        Self(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.enter(Phase::Idle);
    }
}

/// The socket, noting when bytes arrive on an idle connection.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before && self.activity.phase() == Phase::Idle {
            self.activity.enter(Phase::Head);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
