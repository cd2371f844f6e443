//! A TCP proxy on loopback that a test can cut and restore: while cut,
//! every open connection is dropped and new ones are closed at once, as a
//! database that went away looks to its clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use switchboard::config::StorageConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running proxy.
pub struct CutProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    /// Cancelled to drop every connection open now.
    open: Arc<std::sync::Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl CutProxy {
    /// Forwards connections to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let (c, o, s) = (cut.clone(), open.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = s.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((client, _)) = accepted else { continue };
                if c.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let gone = o.lock().unwrap().clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = gone.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
            }
        });
        Self {
            addr,
            cut,
            open,
            stop,
        }
    }

    /// A proxy in front of the test server, and `db`'s storage config
    /// through it.
    pub async fn before(db: &super::PgTestDb) -> (Self, StorageConfig) {
        let upstream = url::Url::parse(&super::postgres_url()).unwrap();
        let target = format!(
            "{}:{}",
            upstream.host_str().unwrap(),
            upstream.port().unwrap_or(5432)
        );
        let addr = tokio::net::lookup_host(&target)
            .await
            .unwrap()
            .next()
            .unwrap();
        let proxy = Self::start(addr).await;
        let url = db.config.url.replacen(&target, &proxy.addr.to_string(), 1);
        assert_ne!(url, db.config.url);
        let storage = StorageConfig {
            url,
            ..db.config.clone()
        };
        (proxy, storage)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        open.cancel();
        *open = CancellationToken::new();
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.open.lock().unwrap().cancel();
    }
}
