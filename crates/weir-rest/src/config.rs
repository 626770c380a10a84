//! How the REST server is set up: where it listens, who may call it, where savepoints may go.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::error::StartError;

/// Flink's default REST port.
pub const DEFAULT_PORT: u16 = 8081;

/// The largest request body accepted; Flink's requests are a few hundred bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// The REST server's settings.
#[derive(Clone, Debug)]
pub struct RestConfig {
    /// The address to listen on: loopback unless a token is set.
    pub bind: IpAddr,
    /// The port; 0 picks a free one.
    pub port: u16,
    /// When set, every API request needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Where a savepoint goes when a request names no directory
    /// (`execution.checkpointing.savepoint-dir`). Also an allowed root.
    pub default_savepoint_dir: Option<PathBuf>,
    /// More directories under which requests may put savepoints.
    pub savepoint_roots: Vec<PathBuf>,
    pub max_body_bytes: usize,
}

impl Default for RestConfig {
    fn default() -> Self {
        RestConfig {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            token: None,
            default_savepoint_dir: None,
            savepoint_roots: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl RestConfig {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.port)
    }

    /// Every directory a request may put a savepoint under.
    pub fn allowed_roots(&self) -> Vec<PathBuf> {
        self.default_savepoint_dir
            .iter()
            .chain(&self.savepoint_roots)
            .cloned()
            .collect()
    }

    /// Refuses a setup that would expose the job's controls: listening beyond loopback needs a
    /// token, and a token must not be blank.
    pub fn validate(&self) -> Result<(), StartError> {
        if let Some(token) = &self.token {
            if token.trim().is_empty() || token.chars().any(|c| c.is_whitespace()) {
                return Err(StartError::BadToken);
            }
        } else if !self.bind.is_loopback() {
            return Err(StartError::TokenRequired { bind: self.bind });
        }
        if self.max_body_bytes == 0 {
            return Err(StartError::Invalid(
                "the request body limit must be positive".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_needs_no_token_but_any_other_address_does() {
        assert!(RestConfig::default().validate().is_ok());
        let open = RestConfig {
            bind: "0.0.0.0".parse().unwrap(),
            ..RestConfig::default()
        };
        let e = open.validate().unwrap_err();
        assert!(e.to_string().contains("--rest-token"), "{e}");
        let with_token = RestConfig {
            token: Some("s3cret".into()),
            ..open
        };
        assert!(with_token.validate().is_ok());
    }

    #[test]
    fn a_blank_token_is_refused() {
        let c = RestConfig {
            token: Some("  ".into()),
            ..RestConfig::default()
        };
        assert!(matches!(c.validate(), Err(StartError::BadToken)));
    }

    #[test]
    fn the_default_savepoint_directory_is_an_allowed_root() {
        let c = RestConfig {
            default_savepoint_dir: Some("/sp".into()),
            savepoint_roots: vec!["/more".into()],
            ..RestConfig::default()
        };
        assert_eq!(
            c.allowed_roots(),
            vec![PathBuf::from("/sp"), PathBuf::from("/more")]
        );
    }
}
