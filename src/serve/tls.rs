//! HTTPS for the service's endpoints: `[serve] tls_cert` and `tls_key`
//! (PEM files) are read at start, and every connection is a TLS session
//! (rustls, TLS 1.2 and 1.3) before it reaches the endpoints.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;
use crate::error::{Error, Result};

/// How long a client may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The acceptor for `files`; a file that cannot be read or used is a
/// configuration error that names it.
pub(super) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor> {
    let unusable = |path: &Path, what: &str, e: &dyn std::fmt::Display| {
        Error::refused(
            format!("serve.{what} = {:?} cannot be used: {e}", path.display()),
            format!(
                "give a PEM file ({})",
                if what == "tls_cert" {
                    "the server's certificate first, then its chain"
                } else {
                    "the certificate's private key: PKCS#8, PKCS#1 or SEC1"
                }
            ),
        )
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| unusable(&files.cert, "tls_cert", &e))?;
    if certs.is_empty() {
        return Err(unusable(
            &files.cert,
            "tls_cert",
            &"it holds no certificate",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| unusable(&files.key, "tls_key", &e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(format!("setting up TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            unusable(
                &files.key,
                "tls_key",
                &format!("it does not fit the certificate: {e}"),
            )
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A TCP listener whose connections are TLS sessions: a client that fails
/// its handshake (or takes too long over it) is dropped, and the next one
/// is accepted.
pub(super) struct TlsListener {
    pub(super) tcp: TcpListener,
    pub(super) acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (tcp, addr) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match tokio::time::timeout(HANDSHAKE, self.acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::debug!(%addr, error = %e, "a TLS handshake failed"),
                Err(_) => tracing::debug!(%addr, "a TLS handshake took too long"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
