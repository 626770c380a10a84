//! The `high-availability.*` options, typed and validated: whether job managers coordinate
//! through ZooKeeper, and how to reach it.
//!
//! Flink's names: `high-availability.type` (`none` or `zookeeper`),
//! `high-availability.zookeeper.quorum`, `high-availability.zookeeper.path.root` (default
//! `/weir`), `high-availability.storageDir`, and the client's
//! `high-availability.zookeeper.client.session-timeout` (default 60 s) and
//! `.connection-timeout` (default 15 s).
//!
//! ```
//! use weir_core::config::{Config, HighAvailabilityConfig};
//! let mut config = Config::new();
//! config.set("high-availability.type", "zookeeper").unwrap();
//! config.set("high-availability.zookeeper.quorum", "zk1:2181,zk2:2181").unwrap();
//! config.set("high-availability.storageDir", "s3://bucket/weir-ha").unwrap();
//! let HighAvailabilityConfig::ZooKeeper(zk) = HighAvailabilityConfig::from_config(&config).unwrap()
//! else { unreachable!() };
//! assert_eq!(zk.root, "/weir");
//! assert_eq!(zk.session_timeout.as_secs(), 60);
//! ```

use super::{invalid, Config, ConfigError};
use std::time::Duration;

const TYPE: &str = "high-availability.type";
const QUORUM: &str = "high-availability.zookeeper.quorum";
const ROOT: &str = "high-availability.zookeeper.path.root";
const STORAGE_DIR: &str = "high-availability.storageDir";
const SESSION_TIMEOUT: &str = "high-availability.zookeeper.client.session-timeout";
const CONNECTION_TIMEOUT: &str = "high-availability.zookeeper.client.connection-timeout";

/// Whether and how job managers are highly available.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum HighAvailabilityConfig {
    /// One job manager; ids and checkpoints are found in checkpoint storage on `--resume`.
    #[default]
    None,
    /// Job managers elect a leader in ZooKeeper, which also holds the checkpoint id counter
    /// and the pointers to the completed checkpoints.
    ZooKeeper(ZooKeeperHaConfig),
}

/// How to reach ZooKeeper, and where Weir's znodes live in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZooKeeperHaConfig {
    /// `host:port` pairs separated by commas.
    pub quorum: String,
    /// The znode under which every job's znodes live: absolute, without a trailing `/`.
    pub root: String,
    /// Where high-availability files other than checkpoints go (a path, `file://` or `s3://`
    /// URL); checkpoint metadata itself stays in checkpoint storage.
    pub storage_dir: String,
    /// The ZooKeeper session timeout asked for: a job manager silent for this long loses its
    /// session, and with it leadership.
    pub session_timeout: Duration,
    /// How long to wait for a connection, and for one ZooKeeper operation, before reporting
    /// ZooKeeper as unavailable.
    pub connection_timeout: Duration,
}

impl ZooKeeperHaConfig {
    pub const DEFAULT_ROOT: &'static str = "/weir";
    pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

    /// A configuration with the defaults for everything but the quorum and storage directory.
    pub fn new(quorum: &str, storage_dir: &str) -> ZooKeeperHaConfig {
        ZooKeeperHaConfig {
            quorum: quorum.to_string(),
            root: Self::DEFAULT_ROOT.to_string(),
            storage_dir: storage_dir.to_string(),
            session_timeout: Self::DEFAULT_SESSION_TIMEOUT,
            connection_timeout: Self::DEFAULT_CONNECTION_TIMEOUT,
        }
    }

    /// Refuses a quorum, root or timeout that cannot work, naming the option.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_quorum(&self.quorum)?;
        validate_root(&self.root)?;
        if self.storage_dir.trim().is_empty() {
            return Err(invalid(
                STORAGE_DIR,
                &self.storage_dir,
                "required with high-availability.type zookeeper: a directory or s3:// URL".into(),
            ));
        }
        if self.session_timeout < Duration::from_millis(500) {
            return Err(invalid(
                SESSION_TIMEOUT,
                &format!("{:?}", self.session_timeout),
                "must be at least 500 ms".into(),
            ));
        }
        if self.connection_timeout < Duration::from_millis(100) {
            return Err(invalid(
                CONNECTION_TIMEOUT,
                &format!("{:?}", self.connection_timeout),
                "must be at least 100 ms".into(),
            ));
        }
        Ok(())
    }
}

impl HighAvailabilityConfig {
    /// Reads and validates the `high-availability.*` options. With `none` the ZooKeeper
    /// options are ignored, as Flink does.
    pub fn from_config(config: &Config) -> Result<HighAvailabilityConfig, ConfigError> {
        let kind = config.get(TYPE).unwrap_or("none");
        match kind.to_ascii_lowercase().as_str() {
            "none" => Ok(HighAvailabilityConfig::None),
            "zookeeper" => {
                let required = |key: &str, example: &str| {
                    config
                        .get(key)
                        .filter(|v| !v.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| {
                            invalid(
                                key,
                                "",
                                format!("required with {TYPE} zookeeper (e.g. {example})"),
                            )
                        })
                };
                let zk = ZooKeeperHaConfig {
                    quorum: required(QUORUM, "zk1:2181,zk2:2181,zk3:2181")?,
                    root: config
                        .get(ROOT)
                        .unwrap_or(ZooKeeperHaConfig::DEFAULT_ROOT)
                        .to_string(),
                    storage_dir: required(STORAGE_DIR, "s3://bucket/weir-ha")?,
                    session_timeout: config
                        .get_duration(SESSION_TIMEOUT)?
                        .unwrap_or(ZooKeeperHaConfig::DEFAULT_SESSION_TIMEOUT),
                    connection_timeout: config
                        .get_duration(CONNECTION_TIMEOUT)?
                        .unwrap_or(ZooKeeperHaConfig::DEFAULT_CONNECTION_TIMEOUT),
                };
                zk.validate()?;
                Ok(HighAvailabilityConfig::ZooKeeper(zk))
            }
            _ => Err(invalid(TYPE, kind, "expected none or zookeeper".into())),
        }
    }

    pub fn is_enabled(&self) -> bool {
        matches!(self, HighAvailabilityConfig::ZooKeeper(_))
    }
}

fn validate_quorum(quorum: &str) -> Result<(), ConfigError> {
    let bad = |reason: String| Err(invalid(QUORUM, quorum, reason));
    if quorum.trim().is_empty() {
        return bad("empty; expected host:port pairs separated by commas".into());
    }
    for server in quorum.split(',').map(str::trim) {
        if server.is_empty() {
            return bad("an empty server between commas".into());
        }
        if server.contains('/') {
            return bad(format!(
                "'{server}' holds a path; set the znode root with {ROOT} instead"
            ));
        }
        // An IPv6 address is bracketed: [::1]:2181.
        let port = match server.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && !host.ends_with(':') => port,
            Some(_) => return bad(format!("'{server}' is not host:port")),
            None => return bad(format!("'{server}' has no port; write it as host:port")),
        };
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
            return bad(format!("'{port}' in '{server}' is not a port (1-65535)"));
        }
    }
    Ok(())
}

fn validate_root(root: &str) -> Result<(), ConfigError> {
    let bad = |reason: &str| Err(invalid(ROOT, root, reason.to_string()));
    if !root.starts_with('/') {
        return bad("must be an absolute znode path such as /weir");
    }
    if root.len() > 1 && root.ends_with('/') {
        return bad("must not end with '/'");
    }
    if root == "/" {
        return bad("must name a znode below /, such as /weir");
    }
    if root == "/zookeeper" || root.starts_with("/zookeeper/") {
        return bad("/zookeeper is reserved by ZooKeeper");
    }
    for segment in root[1..].split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return bad("holds an empty, '.' or '..' segment");
        }
        if segment.chars().any(|c| c.is_control()) {
            return bad("holds a control character");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zookeeper(pairs: &[(&str, &str)]) -> Result<HighAvailabilityConfig, ConfigError> {
        let mut c = Config::new();
        c.set(TYPE, "zookeeper").unwrap();
        c.set(QUORUM, "127.0.0.1:2181").unwrap();
        c.set(STORAGE_DIR, "/tmp/ha").unwrap();
        for (k, v) in pairs {
            c.set(k, v).unwrap();
        }
        HighAvailabilityConfig::from_config(&c)
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        zookeeper(pairs).unwrap_err().to_string()
    }

    #[test]
    fn without_options_high_availability_is_off() {
        assert_eq!(
            HighAvailabilityConfig::from_config(&Config::new()).unwrap(),
            HighAvailabilityConfig::None
        );
        let mut c = Config::new();
        c.set(TYPE, "NONE").unwrap();
        c.set(QUORUM, "not checked when off").unwrap();
        assert!(!HighAvailabilityConfig::from_config(&c)
            .unwrap()
            .is_enabled());
    }

    #[test]
    fn zookeeper_options_are_read_with_flink_names_and_defaults() {
        let HighAvailabilityConfig::ZooKeeper(zk) = zookeeper(&[
            (QUORUM, "zk1:2181, zk2:2182,[::1]:2183"),
            (ROOT, "/weir/prod"),
            (SESSION_TIMEOUT, "10 s"),
            (CONNECTION_TIMEOUT, "2 s"),
        ])
        .unwrap() else {
            panic!("expected zookeeper");
        };
        assert_eq!(zk.quorum, "zk1:2181, zk2:2182,[::1]:2183");
        assert_eq!(zk.root, "/weir/prod");
        assert_eq!(zk.storage_dir, "/tmp/ha");
        assert_eq!(zk.session_timeout, Duration::from_secs(10));
        assert_eq!(zk.connection_timeout, Duration::from_secs(2));
        let HighAvailabilityConfig::ZooKeeper(zk) = zookeeper(&[]).unwrap() else {
            panic!("expected zookeeper");
        };
        assert_eq!(zk, ZooKeeperHaConfig::new("127.0.0.1:2181", "/tmp/ha"));
    }

    #[test]
    fn zookeeper_without_quorum_or_storage_dir_is_an_error_naming_the_option() {
        let mut c = Config::new();
        c.set(TYPE, "zookeeper").unwrap();
        let e = HighAvailabilityConfig::from_config(&c)
            .unwrap_err()
            .to_string();
        assert!(e.contains(QUORUM) && e.contains("required"), "{e}");
        c.set(QUORUM, "zk:2181").unwrap();
        let e = HighAvailabilityConfig::from_config(&c)
            .unwrap_err()
            .to_string();
        assert!(e.contains(STORAGE_DIR), "{e}");
    }

    #[test]
    fn malformed_quorums_roots_types_and_timeouts_are_refused() {
        for quorum in [
            "zk1",
            "zk1:",
            "zk1:0",
            "zk1:99999",
            "zk1:2181,",
            ":2181",
            "zk:2181/x",
        ] {
            let e = error(&[(QUORUM, quorum)]);
            assert!(e.contains(QUORUM), "{quorum}: {e}");
        }
        for root in ["weir", "/weir/", "/", "/a//b", "/a/../b", "/zookeeper"] {
            let e = error(&[(ROOT, root)]);
            assert!(e.contains(ROOT), "{root}: {e}");
        }
        assert!(error(&[(TYPE, "kubernetes")]).contains("expected none or zookeeper"));
        assert!(error(&[(SESSION_TIMEOUT, "100 ms")]).contains(SESSION_TIMEOUT));
        assert!(error(&[(SESSION_TIMEOUT, "soon")]).contains(SESSION_TIMEOUT));
        assert!(error(&[(CONNECTION_TIMEOUT, "1 ms")]).contains(CONNECTION_TIMEOUT));
    }

    #[test]
    fn environment_variables_reach_the_camel_case_storage_dir_option() {
        let mut c = Config::new();
        c.load_env([(
            "WEIR_HIGH_AVAILABILITY_STORAGEDIR".to_string(),
            "/ha".to_string(),
        )]);
        assert_eq!(c.get(STORAGE_DIR), Some("/ha"));
    }
}
