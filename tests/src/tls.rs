//! HTTPS upstreams for the network tests: a throwaway CA made by the test, a server certificate
//! it signs for `127.0.0.1`, and a server on `127.0.0.1:0` that answers every request with the
//! request's own head (so a test sees what reached the upstream, and what came back to the
//! sandbox after the proxy scrubbed it).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What an upstream saw: each request's head, in order.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// The longest request head the echo upstream reads (a test's requests are a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;

/// A TLS server configuration for `127.0.0.1` (CN `cn`) signed by a new CA named `ca_cn`, and
/// that CA's certificate (PEM).
pub fn server_config(cn: &str, ca_cn: &str) -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, ca_cn);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(tls)), ca.pem()))
}

/// An HTTPS upstream on 127.0.0.1 whose certificate (CN `cn`, SAN 127.0.0.1) is signed by a
/// throwaway CA of its own named `ca_cn`; answers each request with its head as the body and
/// closes. Returns its address, its CA (PEM) and what it saw. Call within a tokio runtime.
pub async fn echo_upstream(cn: &str, ca_cn: &str) -> anyhow::Result<(SocketAddr, String, Seen)> {
    let (acceptor, ca_pem) = server_config(cn, ca_cn)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let seen: Seen = Arc::default();
    let for_task = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), for_task.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < MAX_HEAD {
                    if !matches!(tls.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                if let Ok(mut seen) = seen.lock() {
                    seen.push(head.clone());
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{head}",
                    head.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Ok((addr, ca_pem, seen))
}

/// HTTPS in front of a plain-HTTP server at `backend` (git's `http-backend` host): terminates
/// TLS with a certificate for 127.0.0.1 from a new CA named `ca_cn` and pipes the bytes through.
/// Returns its address and the CA (PEM).
pub async fn tls_front(backend: SocketAddr, ca_cn: &str) -> anyhow::Result<(SocketAddr, String)> {
    let (acceptor, ca_pem) = server_config("the https front", ca_cn)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    Ok((addr, ca_pem))
}
