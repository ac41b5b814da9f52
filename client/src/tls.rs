//! How the client trusts an `https://` / `wss://` server: rustls with the
//! system's roots (the same store `curl` uses, `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` respected), plus any CA the caller names (`--cacert`),
//! or, only when asked for by name, no verification at all (`--insecure`,
//! for a test server's self-signed certificate). One config serves both
//! the HTTP requests (reqwest) and the WebSockets (tungstenite).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Result};

/// What the client trusts beyond the system's roots.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trust {
    /// Extra CA certificates (DER), from PEM files.
    extra: Vec<CertificateDer<'static>>,
    /// Accept any certificate (still a TLS connection: encrypted, not
    /// authenticated).
    insecure: bool,
}

impl Trust {
    /// Adds the certificates of the PEM file `path` to the trusted roots.
    /// Fails when the file cannot be read or holds no certificate.
    pub(crate) fn add_pem_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read(path).map_err(|e| {
            Error::InvalidArgument(format!("cannot read CA file {}: {e}", path.display()))
        })?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&text)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| {
                Error::InvalidArgument(format!("CA file {} is not PEM: {e}", path.display()))
            })?;
        if certs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "CA file {} holds no certificate (expected PEM \"BEGIN CERTIFICATE\")",
                path.display()
            )));
        }
        self.extra.extend(certs);
        Ok(())
    }

    pub(crate) fn set_insecure(&mut self) {
        self.insecure = true;
    }

    /// The rustls config: the system's roots and the extra CAs, or no
    /// verification when insecure. Reading the system's store costs a few
    /// milliseconds, so only `https://` clients build one.
    pub(crate) fn config(&self) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidArgument(format!("TLS setup: {e}")))?;
        let config = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            // Unreadable entries of the system store are skipped: one bad
            // file must not stop the others (and a --cacert may be all
            // that is needed).
            let system = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(system.certs);
            for cert in &self.extra {
                roots.add(cert.clone()).map_err(|e| {
                    Error::InvalidArgument(format!("a CA certificate is not usable: {e}"))
                })?;
            }
            if roots.is_empty() {
                return Err(Error::InvalidArgument(
                    "no certificate to trust: the system's store is empty and no --cacert was given".into(),
                ));
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Error::InvalidArgument(format!("TLS setup: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(GivenCertificates {
                    webpki,
                    given: self.extra.clone(),
                }))
                .with_no_client_auth()
        };
        Ok(Arc::new(config))
    }
}

/// The system's roots and the `--cacert` certificates, verified as any
/// TLS client does; and, as `curl --cacert` does, a server whose own
/// certificate is exactly one the user gave, though it is marked as a CA
/// (OpenSSL 3's `req -x509` makes every self-signed certificate so, and
/// docs/DEPLOY.md's recipe is one). The user named that very certificate:
/// it is trusted as itself, for the names it holds, and only while valid
/// (webpki checks validity before the CA mark it refuses).
#[derive(Debug)]
struct GivenCertificates {
    webpki: Arc<WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for GivenCertificates {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(refused) => refused,
        };
        let ca_as_end_entity = matches!(
            &refused,
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))
                if other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity)
        );
        let given = self
            .given
            .iter()
            .any(|cert| cert.as_ref() == end_entity.as_ref());
        if !(ca_as_end_entity && given) {
            return Err(refused);
        }
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `--insecure`: accepts any server certificate, but still checks that the
/// handshake is signed by the key in it (so the connection is TLS, only
/// unauthenticated).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
