//! The one TLS policy: outbound connections trust the bundled Mozilla roots
//! and nothing else. A loopback HTTPS server with a certificate from a
//! private CA is reached by a client told about that CA (the control) and
//! refused by the gateway's HTTP client and by its MCP client.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use switchboard::config::{Config, Env, McpServerConfig};
use switchboard::tools::{ToolRuntime, mcp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Server {
    port: u16,
    ca: CertificateDer<'static>,
}

/// An HTTPS server on 127.0.0.1 for "localhost", answering every request
/// with 200 "ok", its certificate issued by a CA made for the test.
async fn private_ca_server() -> Server {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();

    switchboard::http::client::install_crypto();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Server {
        port,
        ca: ca.der().clone(),
    }
}

#[tokio::test]
async fn a_certificate_outside_the_bundled_roots_is_refused() {
    let server = private_ca_server().await;
    let url = format!("https://localhost:{}/", server.port);

    // The control: the same server is fine for a client that trusts its CA.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.ca.clone()).unwrap();
    let trusting = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let control = reqwest::Client::builder()
        .tls_backend_preconfigured(trusting)
        .build()
        .unwrap();
    let body = control
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "ok");

    let refused = switchboard::http::client::client()
        .get(&url)
        .send()
        .await
        .unwrap_err();
    let chain = format!("{:?}", anyhow::Error::from(refused));
    assert!(chain.contains("UnknownIssuer"), "{chain}");

    let runtime = ToolRuntime::build(
        &Config::default(),
        &Env::default(),
        switchboard::adapters::platforms(&Config::default()),
    )
    .unwrap();
    let remote = McpServerConfig {
        name: "remote".into(),
        command: None,
        args: vec![],
        env: Default::default(),
        url: Some(format!("{url}mcp")),
        headers: Default::default(),
        timeout_secs: 5,
    };
    let err = mcp::connect_and_register(&remote, &Env::default(), &runtime.registry)
        .await
        .map(|_| ())
        .unwrap_err();
    // Past the handshake the server's plain "ok" would fail differently
    // (not an MCP answer); refused at TLS, the request is never sent.
    assert!(err.to_string().contains("error sending request"), "{err}");
    assert!(runtime.registry.get("multiply").is_none());
}
