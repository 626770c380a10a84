//! Who may talk to a cluster's ports: the secret every process of a cluster shares
//! (`security.internal.secret`), the control plane's check of it, the data plane's
//! challenge–response, and the refusal to listen beyond loopback without it or mutual TLS
//! ([`crate::tls`]).
//!
//! Without a secret or TLS, the control plane and the data plane listen on loopback only:
//! anyone who reaches the control plane could register a task manager and be sent the job's
//! records, and anyone who reaches a data port could feed records into the job or claim to
//! have taken a barrier. With a secret:
//!
//! - every control-plane call carries a credential derived from it (an HMAC-SHA256 of a fixed
//!   label), which the job manager checks in constant time before anything is registered or
//!   acknowledged;
//! - each data connection starts with a challenge–response both ways (HMAC-SHA256 over two
//!   fresh nonces, one label per direction) before a frame of records or credits crosses it,
//!   so the secret itself never travels.
//!
//! The secret alone does not encrypt: someone who can watch the network between the processes
//! reads the records, and can replay the control plane's credential. Mutual TLS encrypts both
//! planes; with both, the secret's checks run inside TLS.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use weir_core::config::Config;

use crate::error::ClusterError;
use crate::tls::{
    ClusterTls, TLS_CERT_OPTION, TLS_ENABLED_OPTION, TLS_KEY_OPTION, TLS_TRUST_OPTION,
};

/// The option holding the secret itself.
pub const SECRET_OPTION: &str = "security.internal.secret";
/// The option naming a file that holds the secret (kept out of `ps` and shell history).
pub const SECRET_FILE_OPTION: &str = "security.internal.secret-file";
/// The environment variable that may hold the secret.
pub const SECRET_ENV: &str = "WEIR_CLUSTER_SECRET";
/// Shorter secrets are refused: they can be guessed offline from one recorded handshake.
pub const MIN_SECRET_LEN: usize = 16;

/// The control plane's metadata header with the caller's credential.
pub(crate) const AUTH_HEADER: &str = "x-weir-cluster-auth";
const CONTROL_LABEL: &[u8] = b"weir control plane v1";
const PRODUCER_LABEL: &[u8] = b"weir data plane v1: producer";
const CONSUMER_LABEL: &[u8] = b"weir data plane v1: consumer";
/// Opens the consumer's challenge, so a producer that meets something else can say so.
pub(crate) const CHALLENGE_MAGIC: &[u8; 4] = b"WCHL";
pub(crate) const NONCE_LEN: usize = 32;
const TAG_LEN: usize = 32;

/// A bad secret, or one that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{from}: the cluster's secret is {len} bytes long; use at least {MIN_SECRET_LEN} (e.g. the output of `openssl rand -hex 32`)")]
    TooShort { from: String, len: usize },
    #[error("cannot read {SECRET_FILE_OPTION} {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("both {SECRET_OPTION} and {SECRET_FILE_OPTION} are set: keep one")]
    Ambiguous,
}

/// The secret every process of a cluster shares.
#[derive(Clone)]
pub struct ClusterSecret {
    key: hmac::Key,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// The secret `secret`, read from `from` (named in errors).
    pub fn new(secret: &[u8], from: &str) -> Result<ClusterSecret, SecretError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort {
                from: from.to_string(),
                len: secret.len(),
            });
        }
        Ok(ClusterSecret {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        })
    }

    /// The secret from [`SECRET_OPTION`] or [`SECRET_FILE_OPTION`] in `config`, else from
    /// `env` (the value of [`SECRET_ENV`]); `None` when none of them is set.
    pub fn from_config(
        config: &Config,
        env: Option<String>,
    ) -> Result<Option<ClusterSecret>, SecretError> {
        let set = |key: &str| config.get(key).filter(|v| !v.is_empty());
        match (set(SECRET_OPTION), set(SECRET_FILE_OPTION)) {
            (Some(_), Some(_)) => Err(SecretError::Ambiguous),
            (Some(secret), None) => ClusterSecret::new(secret.as_bytes(), SECRET_OPTION).map(Some),
            (None, Some(path)) => ClusterSecret::from_file(Path::new(path)).map(Some),
            (None, None) => match env.filter(|s| !s.is_empty()) {
                Some(secret) => ClusterSecret::new(secret.as_bytes(), SECRET_ENV).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The secret in a file; a trailing line break (as editors and `echo` leave) is not part
    /// of it.
    pub fn from_file(path: &Path) -> Result<ClusterSecret, SecretError> {
        let bytes = std::fs::read(path).map_err(|source| SecretError::File {
            path: path.display().to_string(),
            source,
        })?;
        let end = bytes
            .iter()
            .rposition(|b| !matches!(b, b'\n' | b'\r'))
            .map_or(0, |i| i + 1);
        ClusterSecret::new(
            &bytes[..end],
            &format!("{SECRET_FILE_OPTION} {}", path.display()),
        )
    }

    /// The control plane's credential: the same for every call, so it is computed once.
    pub(crate) fn control_credential(&self) -> String {
        hex(hmac::sign(&self.key, CONTROL_LABEL).as_ref())
    }

    /// Whether `credential` is this secret's control-plane credential (in constant time).
    pub(crate) fn accepts_control(&self, credential: &str) -> bool {
        unhex(credential).is_some_and(|tag| hmac::verify(&self.key, CONTROL_LABEL, &tag).is_ok())
    }

    fn tag(&self, label: &[u8], consumer_nonce: &[u8], producer_nonce: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(label);
        context.update(consumer_nonce);
        context.update(producer_nonce);
        context.sign()
    }

    fn verify(
        &self,
        label: &[u8],
        consumer_nonce: &[u8],
        producer_nonce: &[u8],
        tag: &[u8],
    ) -> bool {
        let data = [label, consumer_nonce, producer_nonce].concat();
        hmac::verify(&self.key, &data, tag).is_ok()
    }
}

/// Refuses to listen on `address` beyond loopback without mutual TLS or a secret. `what` says
/// what the port is for, `risk` what a stranger reaching it could do.
pub fn check_bind(
    address: SocketAddr,
    secret: Option<&ClusterSecret>,
    tls: Option<&ClusterTls>,
    what: &str,
    risk: &str,
) -> Result<(), ClusterError> {
    if secret.is_some() || tls.is_some() || address.ip().is_loopback() {
        return Ok(());
    }
    Err(ClusterError::Insecure(format!(
        "refusing to listen {what} on {address} without {TLS_ENABLED_OPTION} or {SECRET_OPTION}: anyone who reaches the port could {risk}; on every process of the cluster, turn on mutual TLS (-D {TLS_ENABLED_OPTION}=true with {TLS_CERT_OPTION}, {TLS_KEY_OPTION} and {TLS_TRUST_OPTION}) or set a secret (-D {SECRET_FILE_OPTION}=FILE, -D {SECRET_OPTION}=…, or {SECRET_ENV}), or listen on loopback (127.0.0.1) only"
    )))
}

/// The control plane's server side: a call without this cluster's credential is refused
/// before it reaches the service.
pub(crate) fn control_interceptor(
    secret: Option<ClusterSecret>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |request: tonic::Request<()>| {
        let Some(secret) = &secret else {
            return Ok(request);
        };
        let credential = request
            .metadata()
            .get(AUTH_HEADER)
            .and_then(|v| v.to_str().ok());
        if credential.is_some_and(|c| secret.accepts_control(c)) {
            return Ok(request);
        }
        let peer = request
            .remote_addr()
            .map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
        let problem = if credential.is_some() {
            "a wrong credential"
        } else {
            "no credential"
        };
        tracing::warn!(%peer, "refused a control-plane call with {problem}: the caller does not know the cluster's secret");
        Err(tonic::Status::unauthenticated(format!(
            "this cluster requires {SECRET_OPTION}; the call carried {problem}"
        )))
    }
}

/// The control plane's client side: adds this cluster's credential to every call.
pub(crate) fn credential_interceptor(
    secret: Option<&ClusterSecret>,
) -> Result<
    impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone,
    ClusterError,
> {
    let credential = match secret {
        Some(s) => Some(
            tonic::metadata::MetadataValue::try_from(s.control_credential())
                .map_err(|e| ClusterError::Config(format!("the control credential: {e}")))?,
        ),
        None => None,
    };
    Ok(move |mut request: tonic::Request<()>| {
        if let Some(c) = &credential {
            request.metadata_mut().insert(AUTH_HEADER, c.clone());
        }
        Ok(request)
    })
}

/// The consumer's side of a data connection's handshake: challenges the producer, checks its
/// answer, and proves in turn to know the secret. Nothing else is read or written before.
pub(crate) fn challenge_producer(
    stream: &mut (impl Read + Write),
    secret: &ClusterSecret,
) -> Result<(), String> {
    let mut consumer_nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut consumer_nonce)
        .map_err(|_| "no randomness for the data plane's challenge".to_string())?;
    let mut challenge = Vec::with_capacity(CHALLENGE_MAGIC.len() + NONCE_LEN);
    challenge.extend_from_slice(CHALLENGE_MAGIC);
    challenge.extend_from_slice(&consumer_nonce);
    stream
        .write_all(&challenge)
        .map_err(|e| format!("sending the challenge: {e}"))?;
    let mut answer = [0u8; NONCE_LEN + TAG_LEN];
    stream
        .read_exact(&mut answer)
        .map_err(|e| format!("reading the answer to the challenge: {e}"))?;
    let (producer_nonce, tag) = answer.split_at(NONCE_LEN);
    if !secret.verify(PRODUCER_LABEL, &consumer_nonce, producer_nonce, tag) {
        return Err("the peer does not know the cluster's secret".into());
    }
    let proof = secret.tag(CONSUMER_LABEL, &consumer_nonce, producer_nonce);
    stream
        .write_all(proof.as_ref())
        .map_err(|e| format!("sending the proof: {e}"))
}

/// The producer's side of the handshake: answers the consumer's challenge, and checks the
/// consumer's proof before a single frame goes to it.
pub(crate) fn answer_consumer(
    stream: &mut (impl Read + Write),
    secret: &ClusterSecret,
) -> Result<(), String> {
    let mut challenge = [0u8; CHALLENGE_MAGIC.len() + NONCE_LEN];
    stream.read_exact(&mut challenge).map_err(|e| {
        format!("reading the challenge (does the peer have {SECRET_OPTION} set?): {e}")
    })?;
    let (magic, consumer_nonce) = challenge.split_at(CHALLENGE_MAGIC.len());
    if magic != CHALLENGE_MAGIC {
        return Err("the peer sent no challenge: it is not a Weir data port".into());
    }
    let mut producer_nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut producer_nonce)
        .map_err(|_| "no randomness for the data plane's handshake".to_string())?;
    let tag = secret.tag(PRODUCER_LABEL, consumer_nonce, &producer_nonce);
    let mut answer = Vec::with_capacity(NONCE_LEN + TAG_LEN);
    answer.extend_from_slice(&producer_nonce);
    answer.extend_from_slice(tag.as_ref());
    stream
        .write_all(&answer)
        .map_err(|e| format!("answering the challenge: {e}"))?;
    let mut proof = [0u8; TAG_LEN];
    stream.read_exact(&mut proof).map_err(|e| {
        format!("reading the peer's proof (it refused this task manager's answer?): {e}")
    })?;
    if !secret.verify(CONSUMER_LABEL, consumer_nonce, &producer_nonce, &proof) {
        return Err("the peer does not know the cluster's secret".into());
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests;
