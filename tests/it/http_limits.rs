//! The listener's limits, over real sockets: slow request heads are cut
//! off, idle keep-alive runs out, the connection cap refuses extras while
//! open connections keep being served, a slow body still gets 408, header
//! limits answer 431, and a stop lets the request in progress finish.

use crate::common;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use switchboard::config::ServerConfig;
use switchboard::http::{AppState, Limits, router, serve};
use switchboard::telemetry::Health;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

struct Server {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    served: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

fn limits() -> Limits {
    Limits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(1),
        keep_alive: Some(Duration::from_secs(2)),
        max_headers: 20,
        max_header_bytes: 2048,
    }
}

async fn start(limits: Limits) -> Server {
    let (store, dir) = common::sqlite_store().await;
    let server = ServerConfig {
        request_timeout_secs: 1,
        ..ServerConfig::default()
    };
    let extra = Router::new()
        .route(
            "/test/wait",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                "waited"
            }),
        )
        .route(
            "/test/echo",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        );
    let app = router(
        AppState {
            store,
            health: Health::default(),
        },
        &server,
        extra,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let served = tokio::spawn(serve(listener, app, limits, stop.clone()));
    Server {
        addr,
        stop,
        served,
        _dir: dir,
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

/// Reads one response (head and a `content-length` body) off `tcp`.
async fn response(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("a response within 5 s")
            .unwrap();
        assert!(n > 0, "closed before a whole response: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Waits for `tcp` to be closed by the server (EOF or reset), discarding
/// anything sent first; returns how long that took.
async fn closed(tcp: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((started + within).into(), tcp.read(&mut buf)).await {
            Err(_) => panic!("still open after {within:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn slow_request_heads_are_closed_within_the_header_timeout() {
    let server = start(limits()).await;
    let mut trickles = Vec::new();
    for _ in 0..40 {
        let addr = server.addr;
        trickles.push(tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            let started = Instant::now();
            // One byte every 100 ms: the head would take 3.4 s.
            for byte in HEALTHZ {
                if tcp.write_all(&[*byte]).await.is_err() {
                    break;
                }
                let mut probe = [0u8; 64];
                match tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut probe)).await {
                    Err(_) => {}
                    Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                    Ok(Ok(n)) => panic!("answered a trickled head: {:?}", &probe[..n]),
                }
            }
            panic!("the whole head trickled in without the connection being closed")
        }));
    }
    // A connection that says nothing at all is cut off the same way.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let silent_for = closed(&mut silent, Duration::from_secs(4)).await;
    for trickle in trickles {
        let lasted = trickle.await.unwrap();
        assert!(
            lasted >= Duration::from_millis(900) && lasted < Duration::from_millis(2500),
            "a trickling connection lasted {lasted:?} against a 1 s head timeout"
        );
    }
    assert!(silent_for >= Duration::from_millis(900), "{silent_for:?}");
    // Meanwhile a prompt client is served at once.
    let mut prompt = TcpStream::connect(server.addr).await.unwrap();
    prompt.write_all(HEALTHZ).await.unwrap();
    assert!(response(&mut prompt).await.starts_with("HTTP/1.1 200"));
    let metrics = switchboard::telemetry::metrics().render();
    let cut = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchboard_http_connections_closed_total{reason=\"header_timeout\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("a header_timeout count");
    assert!(cut >= 41.0, "{cut}");
}

#[tokio::test]
async fn keep_alive_runs_out_when_idle_but_not_while_requests_keep_coming() {
    let server = start(limits()).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(HEALTHZ).await.unwrap();
    assert!(response(&mut idle).await.starts_with("HTTP/1.1 200"));
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    // Every 400 ms for 3.2 s: longer than both timeouts in all, shorter
    // than either between requests.
    while started.elapsed() < Duration::from_millis(3200) {
        busy.write_all(HEALTHZ).await.unwrap();
        assert!(response(&mut busy).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let lasted = closed(&mut idle, Duration::from_secs(4)).await + started.elapsed();
    assert!(
        lasted >= Duration::from_millis(1900) && lasted < Duration::from_millis(4000),
        "the idle connection lasted {lasted:?} against a 2 s keep-alive"
    );
    busy.write_all(HEALTHZ).await.unwrap();
    assert!(response(&mut busy).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn the_connection_cap_refuses_extras_while_open_connections_are_served() {
    let server = start(Limits {
        max_connections: 4,
        header_read_timeout: Duration::from_secs(5),
        keep_alive: Some(Duration::from_secs(10)),
        ..limits()
    })
    .await;
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(HEALTHZ).await.unwrap();
        assert!(response(&mut tcp).await.starts_with("HTTP/1.1 200"));
        open.push(tcp);
    }
    for _ in 0..3 {
        let mut extra = TcpStream::connect(server.addr).await.unwrap();
        extra.write_all(HEALTHZ).await.unwrap();
        let refused = response(&mut extra).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.to_ascii_lowercase().contains("retry-after: 1"),
            "{refused}"
        );
        closed(&mut extra, Duration::from_secs(3)).await;
    }
    // The four already open still answer.
    for tcp in &mut open {
        tcp.write_all(HEALTHZ).await.unwrap();
        assert!(response(tcp).await.starts_with("HTTP/1.1 200"));
    }
    let metrics = switchboard::telemetry::metrics().render();
    assert!(
        metrics.contains("switchboard_http_connections_refused_total"),
        "{metrics}"
    );
    // One closes; its slot is given to the next newcomer.
    drop(open.pop());
    common::eventually("a freed slot is used", || async {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(HEALTHZ).await.unwrap();
        response(&mut tcp).await.starts_with("HTTP/1.1 200")
    })
    .await;
}

#[tokio::test]
async fn a_slow_body_still_gets_408() {
    let server = start(limits()).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"POST /test/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = response(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_431() {
    let server = start(limits()).await;
    let many: String = (0..30).map(|i| format!("x-h{i}: v\r\n")).collect();
    let large = format!("x-big: {}\r\n", "a".repeat(4096));
    for extra in [many, large] {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{extra}\r\n").as_bytes())
            .await
            .unwrap();
        let answer = response(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    }
    // Within the limits, the same request is served.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let fine: String = (0..10).map(|i| format!("x-h{i}: v\r\n")).collect();
    tcp.write_all(format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{fine}\r\n").as_bytes())
        .await
        .unwrap();
    assert!(response(&mut tcp).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_stop_lets_the_request_in_progress_finish_and_accepts_no_more() {
    let server = start(limits()).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(HEALTHZ).await.unwrap();
    response(&mut idle).await;
    let mut waiting = TcpStream::connect(server.addr).await.unwrap();
    waiting
        .write_all(b"GET /test/wait HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Lets the request reach its handler (nothing to observe) before the stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.cancel();
    let answer = response(&mut waiting).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("waited"),
        "{answer}"
    );
    closed(&mut idle, Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(3), server.served)
        .await
        .expect("serve returns once its connections are done")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(server.addr).await.is_err());
}
