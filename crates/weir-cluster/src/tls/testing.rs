//! Certificates for tests, made at test time: a CA of the test's own and the certificates it
//! issues, written as PEM files the way an operator's would be.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

use super::ClusterTls;

/// A certificate authority.
pub(crate) struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
pub(crate) struct Issued {
    pub cert: String,
    pub key: String,
}

/// What to put in a certificate.
pub(crate) struct Spec {
    pub names: Vec<String>,
    pub server: bool,
    pub client: bool,
    pub expired: bool,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            names: vec!["localhost".into(), "127.0.0.1".into()],
            server: true,
            client: true,
            expired: false,
        }
    }
}

impl TestCa {
    pub(crate) fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A process's certificate for localhost and 127.0.0.1, for server and client use.
    pub(crate) fn issue(&self, name: &str) -> Issued {
        self.issue_with(name, Spec::default())
    }

    pub(crate) fn issue_with(&self, name: &str, spec: Spec) -> Issued {
        let mut params = CertificateParams::new(spec.names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        if spec.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        if spec.expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes `name`'s certificate and key and this CA's certificate into `dir`; returns
    /// their paths (certificate, key, CA).
    pub(crate) fn files(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
        write_files(dir, name, &self.issue(name), &self.pem())
    }

    /// `name`'s TLS, with this CA trusted.
    pub(crate) fn tls(&self, dir: &Path, name: &str) -> ClusterTls {
        let (cert, key, ca) = self.files(dir, name);
        ClusterTls::from_files(&cert, &key, &ca).unwrap()
    }
}

/// Writes an issued certificate, its key and the trusted certificates as `dir/name.*`.
pub(crate) fn write_files(
    dir: &Path,
    name: &str,
    issued: &Issued,
    trusted: &str,
) -> (PathBuf, PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let ca = dir.join(format!("{name}-ca.crt"));
    std::fs::write(&cert, &issued.cert).unwrap();
    std::fs::write(&key, &issued.key).unwrap();
    std::fs::write(&ca, trusted).unwrap();
    (cert, key, ca)
}
