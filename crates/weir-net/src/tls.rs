//! TLS 1.3 for QUIC with one self-signed certificate that every peer pins: no CA, no host name
//! checks; a peer connects only to the scheduler whose certificate is in its access file.

use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use super::NetError;

/// The name clients ask for; the certificate carries it, but pinning is what is checked.
pub const SERVER_NAME: &str = "weir-scheduler";
const ALPN: &[u8] = b"weir/1";

/// ring's provider with AES-128-GCM/SHA-256 preferred: every packet is sealed and opened with
/// it, and the handshake's key schedule runs on SHA-256 instead of SHA-384 (SHA-512's blocks
/// were 9 % of the scheduler's CPU while 10,000 workers connected; BENCHMARKS.md, #35).
/// The others stay offered, so a peer built before this change still connects.
fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(provider)
}

/// A new self-signed certificate and its key, both PEM.
pub fn generate() -> Result<(String, String), NetError> {
    let names = vec![SERVER_NAME.to_string(), "localhost".to_string()];
    let certified =
        rcgen::generate_simple_self_signed(names).map_err(|e| NetError::Tls(e.to_string()))?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

pub fn certificate_der(pem: &str) -> Result<CertificateDer<'static>, NetError> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| NetError::Tls(format!("bad certificate PEM: {e}")))
}

fn key_der(pem: &str) -> Result<PrivateKeyDer<'static>, NetError> {
    use rustls_pki_types::pem::PemObject;
    PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
        .map(PrivateKeyDer::from)
        .or_else(|_| PrivateKeyDer::from_pem_slice(pem.as_bytes()))
        .map_err(|e| NetError::Tls(format!("bad private key PEM: {e}")))
}

pub fn server_config(cert_pem: &str, key_pem: &str) -> Result<quinn::ServerConfig, NetError> {
    let tls = |e: rustls::Error| NetError::Tls(e.to_string());
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_no_client_auth()
        .with_single_cert(vec![certificate_der(cert_pem)?], key_der(key_pem)?)
        .map_err(tls)?;
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    // The scheduler's order decides (rustls follows the client's by default): a peer built
    // before AES-128 was preferred gets it too.
    crypto.ignore_client_order = true;
    let quic = QuicServerConfig::try_from(crypto).map_err(|e| NetError::Tls(e.to_string()))?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(quic)))
}

pub fn client_config(pinned: &CertificateDer<'static>) -> Result<quinn::ClientConfig, NetError> {
    let provider = provider();
    let mut crypto = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| NetError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            certificate: pinned.clone(),
            provider,
        }))
        .with_no_client_auth();
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(crypto).map_err(|e| NetError::Tls(e.to_string()))?;
    Ok(quinn::ClientConfig::new(Arc::new(quic)))
}

/// Accepts exactly one certificate; handshake signatures are still verified.
#[derive(Debug)]
struct Pinned {
    certificate: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.certificate.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the scheduler's certificate is not the one in the access file".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
