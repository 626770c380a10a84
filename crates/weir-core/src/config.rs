//! Configuration with Flink's option names, from a file, the environment and `-D key=value`.
//!
//! A Flink user finds the same keys: `execution.checkpointing.interval`, `.timeout`,
//! `.min-pause`, `.max-concurrent-checkpoints`, `.tolerable-failed-checkpoints`, `.mode`,
//! `.num-retained`, `.dir`, `.incremental`, `.data-inline-threshold`,
//! `.checkpoints-after-tasks-finish` (always on), `.unaligned.enabled`, `.aligned-checkpoint-timeout`,
//! `pipeline.max-parallelism`, the keyed state backend `state.backend.type` with
//! `state.backend.rocksdb.localdir` and `.memory.fixed-per-slot` ([`StateBackendConfig`]), and for `s3://`
//! checkpoint directories `s3.endpoint`, `s3.region`, `s3.access-key`, `s3.secret-key`,
//! `s3.path.style.access` (as Flink's S3 file systems name them) and `s3.allow-http`, and for
//! high availability `high-availability.type`, `high-availability.zookeeper.quorum`,
//! `high-availability.zookeeper.path.root`, `high-availability.storageDir` and the ZooKeeper
//! client's timeouts ([`HighAvailabilityConfig`]), and for cluster mode `heartbeat.*`,
//! `slot.request.timeout`, the cluster's shared secret `security.internal.secret` (or
//! `security.internal.secret-file`) and its mutual TLS `security.ssl.internal.enabled`,
//! `.cert`, `.key` and `.trust-certificates`. Unknown keys and malformed values are errors
//! that name the key, never silently ignored.
//!
//! ```
//! use weir_core::config::{CheckpointConfig, Config};
//! let mut config = Config::new();
//! config.set("execution.checkpointing.interval", "1 s").unwrap();
//! let checkpoints = CheckpointConfig::from_config(&config).unwrap();
//! assert_eq!(checkpoints.interval.unwrap().as_millis(), 1000);
//! assert_eq!(checkpoints.num_retained, 3);
//! ```

mod high_availability;
mod state_backend;

pub use high_availability::{HighAvailabilityConfig, ZooKeeperHaConfig};
pub use state_backend::{StateBackendConfig, StateBackendKind};

use crate::element::BarrierAlignment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A configuration problem, with the key and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown option '{0}'")]
    UnknownKey(String),
    #[error("invalid value '{value}' for '{key}': {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("cannot read config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("malformed line {line} in {path}: expected 'key: value'")]
    Syntax { path: String, line: usize },
}

/// Every option Weir understands, with its default (shown by `weir` help and docs).
pub const OPTIONS: &[(&str, &str)] = &[
    ("parallelism.default", "1"),
    ("pipeline.max-parallelism", "128"),
    ("pipeline.operator-chaining.enabled", "true"),
    ("execution.buffer-timeout.interval", "100 ms"),
    ("execution.checkpointing.interval", "(disabled)"),
    ("execution.checkpointing.timeout", "10 min"),
    ("execution.checkpointing.min-pause", "0 ms"),
    ("execution.checkpointing.max-concurrent-checkpoints", "1"),
    ("execution.checkpointing.tolerable-failed-checkpoints", "0"),
    ("execution.checkpointing.mode", "EXACTLY_ONCE"),
    ("execution.checkpointing.num-retained", "3"),
    ("execution.checkpointing.dir", "./weir-data/checkpoints"),
    ("execution.checkpointing.incremental", "true"),
    ("execution.checkpointing.data-inline-threshold", "20 kb"),
    ("execution.checkpointing.unaligned.enabled", "false"),
    ("execution.checkpointing.aligned-checkpoint-timeout", "0 ms"),
    (
        "execution.checkpointing.checkpoints-after-tasks-finish",
        "true",
    ),
    (
        "execution.checkpointing.savepoint-dir",
        "(none; weir demo: ./weir-data/savepoints)",
    ),
    ("web.checkpoints.history", "10"),
    (
        "s3.endpoint",
        "(AWS; e.g. http://127.0.0.1:9000 for an S3-compatible server)",
    ),
    ("s3.region", "us-east-1"),
    ("s3.access-key", "(AWS_ACCESS_KEY_ID)"),
    ("s3.secret-key", "(AWS_SECRET_ACCESS_KEY)"),
    ("s3.path.style.access", "false"),
    (
        "s3.allow-http",
        "(true when s3.endpoint starts with http://)",
    ),
    (
        "restart-strategy.type",
        "exponential-delay (none without checkpointing)",
    ),
    ("restart-strategy.fixed-delay.attempts", "1"),
    ("restart-strategy.fixed-delay.delay", "1 s"),
    (
        "restart-strategy.failure-rate.max-failures-per-interval",
        "1",
    ),
    (
        "restart-strategy.failure-rate.failure-rate-interval",
        "1 min",
    ),
    ("restart-strategy.failure-rate.delay", "1 s"),
    ("restart-strategy.exponential-delay.initial-backoff", "1 s"),
    ("restart-strategy.exponential-delay.max-backoff", "1 min"),
    (
        "restart-strategy.exponential-delay.backoff-multiplier",
        "1.5",
    ),
    (
        "restart-strategy.exponential-delay.reset-backoff-threshold",
        "1 h",
    ),
    (
        "restart-strategy.exponential-delay.attempts-before-reset-backoff",
        "(unlimited)",
    ),
    ("state.backend.type", "hashmap (or rocksdb)"),
    (
        "state.backend.rocksdb.localdir",
        "(the system's temporary directory)",
    ),
    ("state.backend.rocksdb.memory.fixed-per-slot", "256 mb"),
    ("state.backend.local-recovery", "false"),
    (
        "taskmanager.state.local.root-dirs",
        "(the system's temporary directory)",
    ),
    ("high-availability.type", "none (or zookeeper)"),
    (
        "high-availability.zookeeper.quorum",
        "(required with zookeeper; e.g. zk1:2181,zk2:2181,zk3:2181)",
    ),
    ("high-availability.zookeeper.path.root", "/weir"),
    ("high-availability.storageDir", "(required with zookeeper)"),
    ("high-availability.zookeeper.client.session-timeout", "60 s"),
    (
        "high-availability.zookeeper.client.connection-timeout",
        "15 s",
    ),
    ("heartbeat.interval", "1 s (cluster mode)"),
    ("heartbeat.timeout", "10 s (cluster mode)"),
    ("slot.request.timeout", "5 min (cluster mode)"),
    (
        "security.internal.secret",
        "(none: cluster ports on loopback only; or WEIR_CLUSTER_SECRET)",
    ),
    ("security.internal.secret-file", "(none)"),
    (
        "security.ssl.internal.enabled",
        "false (mutual TLS on the cluster's control and data planes)",
    ),
    (
        "security.ssl.internal.cert",
        "(none: this process's certificate chain, PEM)",
    ),
    (
        "security.ssl.internal.key",
        "(none: this process's private key, PEM)",
    ),
    (
        "security.ssl.internal.trust-certificates",
        "(none: the cluster's CA certificates, PEM)",
    ),
];

/// A flat map of option keys to string values, validated on the way in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets `key` to `value`. Unknown keys are refused; values are checked when read.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        if !OPTIONS.iter().any(|(k, _)| *k == key) {
            return Err(ConfigError::UnknownKey(key.to_string()));
        }
        self.values
            .insert(key.to_string(), value.trim().to_string());
        Ok(())
    }

    /// Parses a `key=value` pair as given to `-D`.
    pub fn set_pair(&mut self, pair: &str) -> Result<(), ConfigError> {
        match pair.split_once('=') {
            Some((k, v)) => self.set(k, v),
            None => Err(ConfigError::Invalid {
                key: pair.to_string(),
                value: String::new(),
                reason: "expected key=value".into(),
            }),
        }
    }

    /// Reads a Flink-style file of `key: value` lines (`#` starts a comment).
    pub fn load_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) = line.split_once(':').ok_or_else(|| ConfigError::Syntax {
                path: path.display().to_string(),
                line: n + 1,
            })?;
            self.set(k, v)?;
        }
        Ok(())
    }

    /// Applies `WEIR_`-prefixed environment variables: `WEIR_EXECUTION_CHECKPOINTING_INTERVAL`
    /// sets `execution.checkpointing.interval` (dots and dashes both become underscores).
    pub fn load_env(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("WEIR_") else {
                continue;
            };
            let wanted = rest.to_ascii_lowercase();
            if let Some((key, _)) = OPTIONS
                .iter()
                .find(|(k, _)| k.replace(['.', '-'], "_").to_ascii_lowercase() == wanted)
            {
                self.values.insert(key.to_string(), value);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn get_duration(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        self.get(key)
            .map(|v| parse_duration(v).map_err(|reason| invalid(key, v, reason)))
            .transpose()
    }

    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        self.get(key)
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| invalid(key, v, "expected a whole number ≥ 0".into()))
            })
            .transpose()
    }

    /// A size in bytes, written as Flink writes memory sizes: `20 kb`, `1mb`, `512` (bytes).
    pub fn get_memory_size(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        self.get(key)
            .map(|v| parse_memory_size(v).map_err(|reason| invalid(key, v, reason)))
            .transpose()
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.get(key)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid(key, v, "expected true or false".into())),
            })
            .transpose()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

pub(crate) fn invalid(key: &str, value: &str, reason: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// Parses a duration the way Flink writes them: `500 ms`, `1s`, `10 min`, `1h 30min`; a bare
/// number is milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t.starts_with('-') {
        return Err("a duration cannot be negative".into());
    }
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    // humantime wants the unit glued to its number: "10 s" → "10s", but "1h 30min" stays split.
    let mut glued = String::with_capacity(t.len());
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        glued.push(c);
        if c.is_ascii_digit() {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
        }
    }
    humantime::parse_duration(&glued)
        .map_err(|e| format!("not a duration ({e}); write it like '500 ms', '1 s' or '10 min'"))
}

/// Parses a memory size the way Flink writes them: a whole number and an optional unit, `b`
/// (the default), `kb`, `mb`, `gb` or `tb` (powers of 1024; `k`, `m`, `g`, `t` and the long
/// names `bytes`, `kibibytes` … too), any case, spaces allowed between them.
pub fn parse_memory_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let help = "write it like '20 kb', '1 mb' or '512' (bytes)";
    if number.is_empty() {
        return Err(format!("not a memory size; {help}"));
    }
    let number: u64 = number
        .parse()
        .map_err(|_| format!("too large a memory size; {help}"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kibibytes" => 10,
        "m" | "mb" | "mebibytes" => 20,
        "g" | "gb" | "gibibytes" => 30,
        "t" | "tb" | "tebibytes" => 40,
        other => return Err(format!("unknown unit '{other}'; {help}")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("too large a memory size; {help}"))
}

/// EXACTLY_ONCE aligns barriers; AT_LEAST_ONCE does not block channels.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum CheckpointingMode {
    ExactlyOnce,
    AtLeastOnce,
}

/// The largest `execution.checkpointing.data-inline-threshold` (as Flink's).
pub const MAX_DATA_INLINE_THRESHOLD: usize = 1 << 20;

/// The checkpointing options, typed and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointConfig {
    /// `None` disables periodic checkpoints.
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub min_pause: Duration,
    pub max_concurrent: u32,
    pub tolerable_failed: u32,
    pub mode: CheckpointingMode,
    pub num_retained: u32,
    pub dir: PathBuf,
    pub incremental: bool,
    /// Unaligned checkpoints (`execution.checkpointing.unaligned.enabled`): barriers overtake
    /// the data queued in the channels, which is stored with the checkpoint. Savepoints stay
    /// aligned.
    pub unaligned: bool,
    /// With unaligned checkpoints on (`execution.checkpointing.aligned-checkpoint-timeout`):
    /// zero, checkpoints start unaligned; more, they start aligned and turn unaligned at a
    /// subtask that has not aligned one this long after its trigger.
    pub aligned_timeout: Duration,
    /// Private state of at most this many bytes (operator state, a manifest, a small
    /// snapshot) is kept inline in the checkpoint's metadata instead of a file of its own.
    pub data_inline_threshold: usize,
    /// Completed/failed checkpoints remembered by the stats tracker.
    pub history_size: u32,
    /// How to reach an `s3://` checkpoint directory.
    pub s3: S3Options,
    /// Local recovery (`state.backend.local-recovery`): where the process keeps a local copy of
    /// the state files it wrote for its latest checkpoints (`taskmanager.state.local.root-dirs`),
    /// which a restore in the same process reads instead of the checkpoint storage. `None`: off.
    pub local_recovery: Option<PathBuf>,
}

/// The `s3.*` options: how to reach S3 or an S3-compatible server for `s3://` checkpoint
/// directories. Unset credentials and region fall back to the usual `AWS_*` environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`) instead of virtual-hosted style.
    pub path_style_access: bool,
    /// `None`: allowed when the endpoint is `http://`.
    pub allow_http: Option<bool>,
}

impl S3Options {
    /// Reads and validates the `s3.*` options.
    pub fn from_config(config: &Config) -> Result<S3Options, ConfigError> {
        let text = |key: &str| {
            config
                .get(key)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let endpoint = text("s3.endpoint");
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(invalid(
                    "s3.endpoint",
                    e,
                    "expected a URL starting with http:// or https://".into(),
                ));
            }
        }
        Ok(S3Options {
            endpoint,
            region: text("s3.region"),
            access_key: text("s3.access-key"),
            secret_key: text("s3.secret-key"),
            path_style_access: config.get_bool("s3.path.style.access")?.unwrap_or(false),
            allow_http: config.get_bool("s3.allow-http")?,
        })
    }

    /// The `s3.*` options from `WEIR_S3_*` environment variables alone (for tools that take
    /// no configuration file).
    pub fn from_env() -> Result<S3Options, ConfigError> {
        let mut config = Config::new();
        config.load_env(std::env::vars());
        S3Options::from_config(&config)
    }
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: None,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            tolerable_failed: 0,
            mode: CheckpointingMode::ExactlyOnce,
            num_retained: 3,
            dir: PathBuf::from("./weir-data/checkpoints"),
            incremental: true,
            unaligned: false,
            aligned_timeout: Duration::ZERO,
            data_inline_threshold: 20 * 1024,
            history_size: 10,
            s3: S3Options::default(),
            local_recovery: None,
        }
    }
}

impl CheckpointConfig {
    /// Reads and validates the `execution.checkpointing.*` options.
    pub fn from_config(config: &Config) -> Result<CheckpointConfig, ConfigError> {
        let d = CheckpointConfig::default();
        let key = "execution.checkpointing.mode";
        let mode = match config.get(key) {
            None => d.mode,
            Some(v) => match v.to_ascii_uppercase().replace('-', "_").as_str() {
                "EXACTLY_ONCE" => CheckpointingMode::ExactlyOnce,
                "AT_LEAST_ONCE" => CheckpointingMode::AtLeastOnce,
                _ => {
                    return Err(invalid(
                        key,
                        v,
                        "expected EXACTLY_ONCE or AT_LEAST_ONCE".into(),
                    ))
                }
            },
        };
        let key = "execution.checkpointing.checkpoints-after-tasks-finish";
        if config.get_bool(key)? == Some(false) {
            return Err(invalid(
                key,
                "false",
                "Weir always goes on checkpointing after a source ends: the source stays in the \
                 job, answering every checkpoint with its final position, until all sources \
                 have ended and the job takes its final checkpoint"
                    .into(),
            ));
        }
        let c = CheckpointConfig {
            interval: config.get_duration("execution.checkpointing.interval")?,
            timeout: config
                .get_duration("execution.checkpointing.timeout")?
                .unwrap_or(d.timeout),
            min_pause: config
                .get_duration("execution.checkpointing.min-pause")?
                .unwrap_or(d.min_pause),
            max_concurrent: config
                .get_u32("execution.checkpointing.max-concurrent-checkpoints")?
                .unwrap_or(d.max_concurrent),
            tolerable_failed: config
                .get_u32("execution.checkpointing.tolerable-failed-checkpoints")?
                .unwrap_or(d.tolerable_failed),
            mode,
            num_retained: config
                .get_u32("execution.checkpointing.num-retained")?
                .unwrap_or(d.num_retained),
            dir: config
                .get("execution.checkpointing.dir")
                .map(PathBuf::from)
                .unwrap_or(d.dir),
            incremental: config
                .get_bool("execution.checkpointing.incremental")?
                .unwrap_or(d.incremental),
            unaligned: config
                .get_bool("execution.checkpointing.unaligned.enabled")?
                .unwrap_or(d.unaligned),
            aligned_timeout: config
                .get_duration("execution.checkpointing.aligned-checkpoint-timeout")?
                .unwrap_or(d.aligned_timeout),
            // Sizes past `usize` saturate; `validate` refuses anything over 1 mb.
            data_inline_threshold: config
                .get_memory_size("execution.checkpointing.data-inline-threshold")?
                .map_or(d.data_inline_threshold, |b| {
                    usize::try_from(b).unwrap_or(usize::MAX)
                }),
            history_size: config
                .get_u32("web.checkpoints.history")?
                .unwrap_or(d.history_size),
            s3: S3Options::from_config(config)?,
            local_recovery: match config.get_bool("state.backend.local-recovery")? {
                Some(true) => Some(
                    config
                        .get("taskmanager.state.local.root-dirs")
                        .filter(|d| !d.is_empty())
                        .map_or_else(std::env::temp_dir, PathBuf::from),
                ),
                _ => None,
            },
        };
        c.validate()?;
        Ok(c)
    }

    /// How the barriers of periodic checkpoints pass the data queued ahead of them (savepoints
    /// and final checkpoints are always aligned).
    pub fn barrier_alignment(&self) -> BarrierAlignment {
        match (self.unaligned, self.aligned_timeout.as_millis() as u64) {
            (false, _) => BarrierAlignment::Aligned,
            (true, 0) => BarrierAlignment::Unaligned,
            (true, timeout_ms) => BarrierAlignment::AlignedWithTimeout { timeout_ms },
        }
    }

    /// Refuses settings that would hang or make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key: &str, value: String, reason: &str| {
            Err(invalid(
                &format!("execution.checkpointing.{key}"),
                &value,
                reason.to_string(),
            ))
        };
        if self.unaligned && self.mode == CheckpointingMode::AtLeastOnce {
            return fail(
                "unaligned.enabled",
                "true".into(),
                "unaligned checkpoints are exactly-once checkpoints: not with mode AT_LEAST_ONCE",
            );
        }
        if let Some(i) = self.interval {
            if i < Duration::from_millis(10) {
                return fail("interval", format!("{i:?}"), "must be at least 10 ms");
            }
        }
        if self.timeout < Duration::from_millis(10) {
            return fail(
                "timeout",
                format!("{:?}", self.timeout),
                "must be at least 10 ms",
            );
        }
        if self.max_concurrent == 0 {
            return fail(
                "max-concurrent-checkpoints",
                "0".into(),
                "must be at least 1",
            );
        }
        if self.num_retained == 0 {
            return fail("num-retained", "0".into(), "must be at least 1");
        }
        if self.data_inline_threshold > MAX_DATA_INLINE_THRESHOLD {
            return fail(
                "data-inline-threshold",
                format!("{} bytes", self.data_inline_threshold),
                "must be at most 1 mb (larger state belongs in files, not in the metadata)",
            );
        }
        if self.history_size == 0 {
            return Err(invalid(
                "web.checkpoints.history",
                "0",
                "must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_as_flink_writes_them() {
        assert_eq!(parse_duration("500").unwrap(), Duration::from_millis(500));
        assert_eq!(
            parse_duration("500 ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("10 min").unwrap(), Duration::from_secs(600));
        assert_eq!(
            parse_duration("1h 30min").unwrap(),
            Duration::from_secs(5400)
        );
        assert!(parse_duration("-1 s").unwrap_err().contains("negative"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn memory_sizes_are_read_as_flink_writes_them() {
        assert_eq!(parse_memory_size("512").unwrap(), 512);
        assert_eq!(parse_memory_size("20 kb").unwrap(), 20 * 1024);
        assert_eq!(parse_memory_size("20kb").unwrap(), 20 * 1024);
        assert_eq!(parse_memory_size(" 1 MB ").unwrap(), 1 << 20);
        assert_eq!(parse_memory_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_memory_size("0 bytes").unwrap(), 0);
        assert!(parse_memory_size("20 kilo")
            .unwrap_err()
            .contains("unknown unit 'kilo'"));
        assert!(parse_memory_size("kb")
            .unwrap_err()
            .contains("not a memory size"));
        assert!(parse_memory_size("-1 kb").is_err());
        assert!(parse_memory_size("1.5 kb").is_err());
        assert!(parse_memory_size("").is_err());
        assert!(parse_memory_size("99999999999 tb")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn the_data_inline_threshold_defaults_to_20_kb_and_is_at_most_1_mb() {
        let key = "execution.checkpointing.data-inline-threshold";
        let read = |value: Option<&str>| {
            let mut config = Config::new();
            if let Some(v) = value {
                config.set(key, v).unwrap();
            }
            CheckpointConfig::from_config(&config).map(|c| c.data_inline_threshold)
        };
        assert_eq!(read(None).unwrap(), 20 * 1024);
        assert_eq!(read(Some("0")).unwrap(), 0);
        assert_eq!(read(Some("1 mb")).unwrap(), 1 << 20);
        let err = read(Some("2 mb")).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("at most 1 mb"), "{err}");
        let err = read(Some("lots")).unwrap_err().to_string();
        assert!(
            err.contains(key) && err.contains("not a memory size"),
            "{err}"
        );
    }

    #[test]
    fn checkpoints_after_tasks_finish_is_always_on() {
        let key = "execution.checkpointing.checkpoints-after-tasks-finish";
        let read = |value: &str| {
            let mut config = Config::new();
            config.set(key, value)?;
            CheckpointConfig::from_config(&config).map(|_| ())
        };
        read("true").unwrap();
        let err = read("false").unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("always"), "{err}");
        let err = read("sometimes").unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err = Config::new()
            .set("execution.checkpointing.intervall", "1s")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown option 'execution.checkpointing.intervall'"
        );
    }

    #[test]
    fn zero_interval_and_zero_concurrency_are_clear_errors() {
        let mut c = Config::new();
        c.set("execution.checkpointing.interval", "0 ms").unwrap();
        let e = CheckpointConfig::from_config(&c).unwrap_err().to_string();
        assert!(e.contains("execution.checkpointing.interval"), "{e}");
        let mut c = Config::new();
        c.set("execution.checkpointing.max-concurrent-checkpoints", "0")
            .unwrap();
        assert!(CheckpointConfig::from_config(&c).is_err());
        let mut c = Config::new();
        c.set("execution.checkpointing.min-pause", "-5 s").unwrap();
        assert!(CheckpointConfig::from_config(&c)
            .unwrap_err()
            .to_string()
            .contains("negative"));
    }

    #[test]
    fn environment_variables_map_onto_option_names() {
        let mut c = Config::new();
        c.load_env([
            (
                "WEIR_EXECUTION_CHECKPOINTING_NUM_RETAINED".to_string(),
                "5".to_string(),
            ),
            ("HOME".to_string(), "/".to_string()),
        ]);
        assert_eq!(c.get("execution.checkpointing.num-retained"), Some("5"));
    }

    #[test]
    fn config_files_hold_key_value_lines() {
        let dir = std::env::temp_dir().join(format!("weir-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weir.yaml");
        std::fs::write(
            &path,
            "# comment\nexecution.checkpointing.mode: AT_LEAST_ONCE\n",
        )
        .unwrap();
        let mut c = Config::new();
        c.load_file(&path).unwrap();
        let cc = CheckpointConfig::from_config(&c).unwrap();
        assert_eq!(cc.mode, CheckpointingMode::AtLeastOnce);
        std::fs::write(&path, "no colon here\n").unwrap();
        assert!(matches!(
            Config::new().load_file(&path),
            Err(ConfigError::Syntax { line: 1, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
