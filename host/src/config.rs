//! Configuration: the data dir and `config.toml`.
//!
//! The data dir is `~/.chitin`, or `$CHITIN_HOME` when set. It holds
//! `config.toml`, `plugins/` (installed components), `cache/` (compiled
//! components) and, by default, `workspace/`. A missing config file means
//! defaults; a present but invalid one is an error naming the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plugins::{GrantConfig, Limits};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read config {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file is not valid TOML or a key has the wrong shape.
    #[error("invalid config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// Neither `$CHITIN_HOME` nor a home directory is known.
    #[error("cannot find a data dir: set CHITIN_HOME or HOME")]
    NoHome,
}

/// The data dir layout.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// `$CHITIN_HOME`, else `~/.chitin`.
    pub fn from_env() -> Result<DataDir, ConfigError> {
        if let Some(home) = std::env::var_os("CHITIN_HOME").filter(|v| !v.is_empty()) {
            return Ok(DataDir { root: PathBuf::from(home) });
        }
        std::env::home_dir().map(|h| DataDir { root: h.join(".chitin") }).ok_or(ConfigError::NoHome)
    }

    /// A data dir at `root`.
    pub fn at(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    /// The data dir itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// Installed plugin components.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// Compiled-component cache.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache").join("components")
    }

    /// The default agent workspace.
    pub fn default_workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }
}

/// The contents of `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The agent's workspace directory; default `<data dir>/workspace`.
    pub workspace: Option<PathBuf>,
    /// Per-call plugin limits.
    pub limits: Limits,
    /// Grants per plugin name (`[plugins.<name>]`).
    pub plugins: BTreeMap<String, GrantConfig>,
}

impl Config {
    /// Reads `path`; a missing file yields the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// Parses config text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid { path: path.to_path_buf(), message: e.to_string() })
    }

    /// The workspace directory, relative paths taken from the data dir.
    pub fn workspace_dir(&self, data: &DataDir) -> PathBuf {
        match &self.workspace {
            Some(p) if p.is_absolute() => p.clone(),
            Some(p) => data.root().join(p),
            None => data.default_workspace(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::WorkspaceAccess;

    #[test]
    fn grants_and_limits_parse() {
        let text = r#"
            [limits]
            timeout_ms = 500
            [plugins.fs]
            workspace = "read"
            [plugins.web]
            network = ["api.example.com"]
        "#;
        let config = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(config.limits.timeout_ms, 500);
        assert_eq!(config.limits.memory_mb, Limits::default().memory_mb);
        assert_eq!(config.plugins["fs"].workspace, WorkspaceAccess::Read);
        assert_eq!(config.plugins["web"].network, ["api.example.com"]);
        assert!(config.plugins["web"].enabled);
    }

    #[test]
    fn a_bad_key_is_named() {
        let err = Config::parse("[plugins.fs]\nworkspace = \"all\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("workspace") && err.contains("all"), "{err}");
        let err = Config::parse("[limits]\ntimeout = 5\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("timeout"), "{err}");
    }
}
