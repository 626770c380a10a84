//! Mutual TLS between a cluster's processes (`security.ssl.internal.*`): the certificates and
//! keys from PEM files, the control plane's TLS (tonic's, with rustls and ring), and the data
//! plane's (rustls over each blocking connection).
//!
//! Every process presents its own certificate and accepts a peer only if the peer's
//! certificate chains to the trusted certificates (the cluster's CA): the job manager accepts
//! only task managers with such a certificate, a task manager talks only to a job manager with
//! one, and task managers exchange data only with each other. The traffic is encrypted.
//!
//! Names: a task manager checks that the job manager's certificate names the host it reached
//! it at (the host of `--jobmanager`, as a DNS name or an IP address in the certificate's
//! subjectAltName). On the data plane, peers are reached at addresses the job manager hands
//! out (on Kubernetes, pod IPs), so there the certificate must chain to the cluster's CA but
//! need not name the address, as with Flink's internal SSL. Use a CA of the cluster's own:
//! any certificate it signed is a member of the cluster.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weir_core::config::Config;

/// Turns mutual TLS on for the control and data planes (Flink's name).
pub const TLS_ENABLED_OPTION: &str = "security.ssl.internal.enabled";
/// This process's certificate chain, PEM (its own certificate first). Flink keeps it in
/// `security.ssl.internal.keystore`.
pub const TLS_CERT_OPTION: &str = "security.ssl.internal.cert";
/// This process's private key, PEM (PKCS#8, PKCS#1 or SEC1), not encrypted. Flink keeps it
/// in `security.ssl.internal.keystore` too.
pub const TLS_KEY_OPTION: &str = "security.ssl.internal.key";
/// The certificates peers' certificates must chain to (the cluster's CA), PEM. Flink's
/// `security.ssl.internal.truststore`.
pub const TLS_TRUST_OPTION: &str = "security.ssl.internal.trust-certificates";

/// A TLS option that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{TLS_ENABLED_OPTION} is true but {option} is not set: give every process of the cluster its certificate ({TLS_CERT_OPTION}), its key ({TLS_KEY_OPTION}) and the cluster's CA ({TLS_TRUST_OPTION}), as PEM files")]
    Missing { option: &'static str },
    #[error("{option} is set but {TLS_ENABLED_OPTION} is not true: set -D {TLS_ENABLED_OPTION}=true to use mutual TLS, or remove the TLS options")]
    NotEnabled { option: &'static str },
    #[error("cannot read {option} {}: {source}", path.display())]
    File {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{option} {}: {reason}", path.display())]
    Pem {
        option: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{TLS_KEY_OPTION} {} does not go with {TLS_CERT_OPTION} {}: {reason}", key.display(), cert.display())]
    KeyMismatch {
        key: PathBuf,
        cert: PathBuf,
        reason: String,
    },
    #[error("{TLS_CERT_OPTION} {}: the certificate is not accepted by {TLS_TRUST_OPTION} {}, so no other process of the cluster would accept it either: {reason}", cert.display(), trust.display())]
    Untrusted {
        cert: PathBuf,
        trust: PathBuf,
        reason: String,
    },
    #[error("{TLS_ENABLED_OPTION}: {0}")]
    Setup(String),
}

/// A process's side of the cluster's mutual TLS: its certificate and key, the certificates it
/// trusts, and the TLS configurations built from them.
#[derive(Clone)]
pub struct ClusterTls {
    cert_pem: Arc<[u8]>,
    key_pem: Arc<[u8]>,
    trust_pem: Arc<[u8]>,
    data_server: Arc<rustls::ServerConfig>,
    data_client: Arc<rustls::ClientConfig>,
    cert_path: PathBuf,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterTls({})", self.cert_path.display())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(option: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::File {
        option,
        path: path.to_path_buf(),
        source,
    })
}

/// The certificates in a PEM file; none is an error.
fn certificates(
    option: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::Pem {
        option,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM file of certificates ({e})")))?;
    if certs.is_empty() {
        return Err(bad(
            "no certificate in it (a PEM block -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

impl ClusterTls {
    /// The TLS of `config`'s `security.ssl.internal.*` options; `None` when it is not enabled.
    /// Options set without `security.ssl.internal.enabled=true`, missing files and files that
    /// are not what they should be are errors that name the option and the file.
    pub fn from_config(config: &Config) -> Result<Option<ClusterTls>, TlsError> {
        let set = |key: &str| config.get(key).filter(|v| !v.is_empty());
        let enabled = match config.get(TLS_ENABLED_OPTION) {
            None | Some("") => false,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(TlsError::Setup(format!(
                        "expected true or false, not {v:?}"
                    )))
                }
            },
        };
        let options = [TLS_CERT_OPTION, TLS_KEY_OPTION, TLS_TRUST_OPTION];
        if !enabled {
            return match options.into_iter().find(|o| set(o).is_some()) {
                Some(option) => Err(TlsError::NotEnabled { option }),
                None => Ok(None),
            };
        }
        let path = |option: &'static str| {
            set(option)
                .map(PathBuf::from)
                .ok_or(TlsError::Missing { option })
        };
        ClusterTls::from_files(
            &path(TLS_CERT_OPTION)?,
            &path(TLS_KEY_OPTION)?,
            &path(TLS_TRUST_OPTION)?,
        )
        .map(Some)
    }

    /// The TLS of a certificate chain, a private key and trusted certificates in PEM files.
    /// The key must belong to the certificate, and the certificate must chain to the trusted
    /// certificates and be valid now, for a server and a client (every process is both).
    pub fn from_files(cert: &Path, key: &Path, trust: &Path) -> Result<ClusterTls, TlsError> {
        let cert_pem = read(TLS_CERT_OPTION, cert)?;
        let key_pem = read(TLS_KEY_OPTION, key)?;
        let trust_pem = read(TLS_TRUST_OPTION, trust)?;
        let chain = certificates(TLS_CERT_OPTION, cert, &cert_pem)?;
        let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
            option: TLS_KEY_OPTION,
            path: key.to_path_buf(),
            reason: match e {
                rustls::pki_types::pem::Error::NoItemsFound => "no private key in it (a PEM block -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY; an encrypted key must be decrypted first, e.g. with openssl pkey)".into(),
                e => format!("not a PEM private key ({e})"),
            },
        })?;
        let mut roots = RootCertStore::empty();
        for der in certificates(TLS_TRUST_OPTION, trust, &trust_pem)? {
            roots.add(der).map_err(|e| TlsError::Pem {
                option: TLS_TRUST_OPTION,
                path: trust.to_path_buf(),
                reason: format!("a certificate in it cannot be trusted: {e}"),
            })?;
        }
        let roots = Arc::new(roots);
        let provider = provider();
        // tonic's server builds its configuration with the process's default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();

        let mismatch = |e: rustls::Error| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                key: key.to_path_buf(),
                cert: cert.to_path_buf(),
                reason: "it is not the private key of that certificate".into(),
            },
            e => TlsError::Pem {
                option: TLS_KEY_OPTION,
                path: key.to_path_buf(),
                reason: format!("cannot use the key: {e}"),
            },
        };
        let setup = |e: rustls::Error| TlsError::Setup(e.to_string());
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
        let member = Arc::new(MemberVerifier {
            roots: roots.clone(),
            provider: provider.clone(),
        });

        // The certificate must be one the other processes accept, as a server and a client.
        let untrusted = |e: rustls::Error| TlsError::Untrusted {
            cert: cert.to_path_buf(),
            trust: trust.to_path_buf(),
            reason: explain(&e),
        };
        let now = UnixTime::now();
        let (own, intermediates) = chain.split_first().expect("at least one certificate");
        member
            .verify_chain(own, intermediates, now)
            .map_err(untrusted)?;
        client_verifier
            .verify_client_cert(own, intermediates, now)
            .map_err(untrusted)?;

        let mut data_server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(setup)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), private_key.clone_key())
            .map_err(mismatch)?;
        // No session tickets: every connection proves its certificate afresh.
        data_server.send_tls13_tickets = 0;
        let mut data_client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(setup)?
            .dangerous()
            .with_custom_certificate_verifier(member)
            .with_client_auth_cert(chain, private_key)
            .map_err(mismatch)?;
        data_client.resumption = rustls::client::Resumption::disabled();

        Ok(ClusterTls {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            trust_pem: trust_pem.into(),
            data_server: Arc::new(data_server),
            data_client: Arc::new(data_client),
            cert_path: cert.to_path_buf(),
        })
    }

    /// The control plane's server side: presents this process's certificate and requires a
    /// client certificate that chains to the trusted ones.
    pub(crate) fn server_tls_config(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &*self.cert_pem,
                &*self.key_pem,
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(&*self.trust_pem))
            .timeout(std::time::Duration::from_secs(10))
    }

    /// The control plane's client side, for a job manager reached at `host`: presents this
    /// process's certificate, and accepts the server's if it chains to the trusted ones and
    /// names `host`.
    pub(crate) fn client_tls_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .domain_name(host.trim_start_matches('[').trim_end_matches(']'))
            .ca_certificate(tonic::transport::Certificate::from_pem(&*self.trust_pem))
            .identity(tonic::transport::Identity::from_pem(
                &*self.cert_pem,
                &*self.key_pem,
            ))
            .timeout(std::time::Duration::from_secs(10))
    }

    /// The data plane's server side of a new connection: the handshake, which fails unless
    /// the client presents a certificate that chains to the trusted ones.
    pub(crate) fn accept(&self, socket: &mut TcpStream) -> Result<rustls::Connection, String> {
        let conn = rustls::ServerConnection::new(self.data_server.clone())
            .map_err(|e| format!("TLS: {e}"))?;
        handshake(conn.into(), socket)
    }

    /// The data plane's client side of a new connection to `host`: the handshake, which
    /// fails unless the server presents a certificate that chains to the trusted ones.
    pub(crate) fn connect(
        &self,
        socket: &mut TcpStream,
        host: &str,
    ) -> Result<rustls::Connection, String> {
        // The name is not checked (see the module's documentation); it only goes into SNI.
        let name = ServerName::try_from(host.to_string())
            .unwrap_or_else(|_| ServerName::try_from("weir-task-manager").expect("a DNS name"));
        let conn = rustls::ClientConnection::new(self.data_client.clone(), name)
            .map_err(|e| format!("TLS: {e}"))?;
        handshake(conn.into(), socket)
    }
}

/// Runs a handshake to its end on a blocking socket (with a read timeout set by the caller).
fn handshake(
    mut conn: rustls::Connection,
    socket: &mut TcpStream,
) -> Result<rustls::Connection, String> {
    while conn.is_handshaking() {
        match conn.complete_io(socket) {
            Ok((0, 0)) => {
                return Err("the peer closed the connection during the TLS handshake".into())
            }
            Ok(_) => {}
            Err(e) => return Err(describe_io(&e)),
        }
    }
    while conn.wants_write() {
        conn.write_tls(socket).map_err(|e| describe_io(&e))?;
    }
    // Frames are encrypted whole and written in one go.
    conn.set_buffer_limit(None);
    Ok(conn)
}

/// What went wrong in a TLS handshake, for a log line.
pub(crate) fn describe_io(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => explain(tls),
        None => format!("TLS handshake: {e}"),
    }
}

/// A rustls error, with what it means here.
pub(crate) fn explain(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let hint = match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            ": it does not chain to the trusted certificates (another CA?)"
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => ": it has expired",
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            ": it is not valid yet (clocks?)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            ": its subjectAltName does not name the host it was reached at"
        }
        E::InvalidCertificate(C::InvalidPurpose | C::InvalidPurposeContext { .. }) => {
            ": it is not for this use (a process's certificate needs extendedKeyUsage serverAuth and clientAuth, or none)"
        }
        E::AlertReceived(A::CertificateRequired) => {
            ": the peer requires a certificate (is security.ssl.internal.enabled set here?)"
        }
        E::AlertReceived(
            A::UnknownCA | A::BadCertificate | A::CertificateUnknown | A::DecryptError,
        ) => ": the peer does not accept this process's certificate (another CA?)",
        E::AlertReceived(A::CertificateExpired) => {
            ": the peer says this process's certificate has expired"
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            ": the peer does not speak TLS (is security.ssl.internal.enabled the same on every process?)"
        }
        _ => "",
    };
    format!("TLS: {e}{hint}")
}

/// Whether `e` (or an error it wraps) is a TLS refusal, either way: a certificate the other
/// side or this one did not accept. Trying again cannot help.
///
/// Some layers (HTTP/2's) keep only the text of an I/O error, so a refusal is also recognized
/// by rustls's words for it.
pub(crate) fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    typed_refusal(e).or_else(|| {
        let mut next = Some(e);
        while let Some(e) = next {
            if let Some(found) = refusal_in_words(&e.to_string()) {
                return Some(found);
            }
            next = e.source();
        }
        None
    })
}

fn typed_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return is_refusal(tls).then(|| explain(tls));
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(found) = io.get_ref().and_then(|inner| typed_refusal(inner)) {
                return Some(found);
            }
        }
        next = e.source();
    }
    None
}

/// The alerts that say the peer refused a certificate.
const REFUSING_ALERTS: [rustls::AlertDescription; 9] = {
    use rustls::AlertDescription as A;
    [
        A::CertificateRequired,
        A::UnknownCA,
        A::BadCertificate,
        A::CertificateUnknown,
        A::CertificateExpired,
        A::CertificateRevoked,
        A::UnsupportedCertificate,
        A::AccessDenied,
        A::DecryptError,
    ]
};

fn is_refusal(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => true,
        rustls::Error::AlertReceived(alert) => REFUSING_ALERTS.contains(alert),
        _ => false,
    }
}

/// A refusal in the text of an error (as rustls's errors display).
fn refusal_in_words(text: &str) -> Option<String> {
    if let Some((_, rest)) = text.split_once("received fatal alert: ") {
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
        return REFUSING_ALERTS
            .iter()
            .find(|a| format!("{a:?}") == name)
            .map(|a| explain(&rustls::Error::AlertReceived(*a)));
    }
    (text.contains("invalid peer certificate") || text.contains("peer sent no certificates"))
        .then(|| format!("TLS: {text}"))
}

/// The data plane's check of a server's certificate: it must chain to the trusted
/// certificates, for server use, and be valid now; its names are not checked.
#[derive(Debug)]
struct MemberVerifier {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl MemberVerifier {
    fn verify_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )
    }
}

impl ServerCertVerifier for MemberVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verify_chain(end_entity, intermediates, now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
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
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
