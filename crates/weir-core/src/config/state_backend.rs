//! Which keyed state backend a job's keyed operators keep their state in (`state.backend.*`,
//! Flink's option names).

use super::{invalid, Config, ConfigError};
use std::path::PathBuf;

/// Where keyed state lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateBackendKind {
    /// In memory, in per-key-group hash tables (`hashmap`, the default).
    #[default]
    HashMap,
    /// In an embedded RocksDB per keyed operator subtask, with an in-memory tier in front
    /// (`rocksdb`): state larger than memory. Needs a build with the `rocksdb` feature.
    RocksDb,
}

/// The `state.backend.*` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBackendConfig {
    /// `state.backend.type`.
    pub kind: StateBackendKind,
    /// `state.backend.rocksdb.localdir`: where each subtask's database is made (and removed
    /// when the subtask ends).
    pub rocksdb_local_dir: PathBuf,
    /// `state.backend.rocksdb.memory.fixed-per-slot`: the memory one keyed operator subtask's
    /// state may use with RocksDB (block cache, write buffers and Weir's in-memory tier).
    pub rocksdb_memory: u64,
}

impl Default for StateBackendConfig {
    fn default() -> Self {
        StateBackendConfig {
            kind: StateBackendKind::HashMap,
            rocksdb_local_dir: std::env::temp_dir(),
            rocksdb_memory: 256 << 20,
        }
    }
}

impl StateBackendConfig {
    /// Reads the `state.backend.*` options.
    pub fn from_config(config: &Config) -> Result<StateBackendConfig, ConfigError> {
        let d = StateBackendConfig::default();
        let key = "state.backend.type";
        let kind = match config.get(key) {
            None => d.kind,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "hashmap" => StateBackendKind::HashMap,
                "rocksdb" => StateBackendKind::RocksDb,
                _ => return Err(invalid(key, v, "expected hashmap or rocksdb".into())),
            },
        };
        let memory_key = "state.backend.rocksdb.memory.fixed-per-slot";
        let rocksdb_memory = config
            .get_memory_size(memory_key)?
            .unwrap_or(d.rocksdb_memory);
        if rocksdb_memory < 16 << 20 {
            return Err(invalid(
                memory_key,
                config.get(memory_key).unwrap_or_default(),
                "RocksDB needs at least 16 mb per subtask".into(),
            ));
        }
        Ok(StateBackendConfig {
            kind,
            rocksdb_local_dir: config
                .get("state.backend.rocksdb.localdir")
                .filter(|d| !d.is_empty())
                .map_or(d.rocksdb_local_dir, PathBuf::from),
            rocksdb_memory,
        })
    }

    /// The options from `WEIR_STATE_BACKEND_*` environment variables alone (what a job built
    /// in code, without a configuration file, runs with).
    pub fn from_env() -> Result<StateBackendConfig, ConfigError> {
        let mut config = Config::new();
        config.load_env(std::env::vars());
        StateBackendConfig::from_config(&config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_is_hashmap_unless_set_and_unknown_names_are_refused() {
        let mut c = Config::new();
        assert_eq!(
            StateBackendConfig::from_config(&c).unwrap().kind,
            StateBackendKind::HashMap
        );
        c.set("state.backend.type", "RocksDB").unwrap();
        c.set("state.backend.rocksdb.memory.fixed-per-slot", "64 mb")
            .unwrap();
        c.set("state.backend.rocksdb.localdir", "/var/weir")
            .unwrap();
        let s = StateBackendConfig::from_config(&c).unwrap();
        assert_eq!(s.kind, StateBackendKind::RocksDb);
        assert_eq!(s.rocksdb_memory, 64 << 20);
        assert_eq!(s.rocksdb_local_dir, PathBuf::from("/var/weir"));

        c.set("state.backend.type", "forst").unwrap();
        let e = StateBackendConfig::from_config(&c).unwrap_err().to_string();
        assert!(
            e.contains("state.backend.type") && e.contains("hashmap or rocksdb"),
            "{e}"
        );
        c.set("state.backend.type", "rocksdb").unwrap();
        c.set("state.backend.rocksdb.memory.fixed-per-slot", "1 mb")
            .unwrap();
        let e = StateBackendConfig::from_config(&c).unwrap_err().to_string();
        assert!(e.contains("at least 16 mb"), "{e}");
    }

    #[test]
    fn environment_variables_choose_the_backend() {
        let mut c = Config::new();
        c.load_env([("WEIR_STATE_BACKEND_TYPE".to_string(), "rocksdb".to_string())]);
        assert_eq!(
            StateBackendConfig::from_config(&c).unwrap().kind,
            StateBackendKind::RocksDb
        );
    }
}
