//! `[mcp_servers.NAME]`: one MCP server the agent uses, parsed here from the
//! raw table `crate::config::Config::mcp_servers` keeps (as channels are),
//! so a bad entry is reported for that server alone and the others run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a server's entry cannot be used. The text names the server and key.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("[mcp_servers.{server}]: {message}")]
pub struct McpConfigError {
    /// The server's name.
    pub server: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// How a remote server is spoken to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteTransport {
    /// Streamable HTTP (the 2025-06-18 revision with sessions, and the
    /// stateless 2026-07-28 one).
    #[default]
    StreamableHttp,
    /// The older HTTP+SSE transport (GET an event stream, POST to the
    /// endpoint it names).
    Sse,
}

/// Where a stdio server runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Inside the OS sandbox (bubblewrap): the workspace, `read_only_paths`,
    /// no network unless `network = true`.
    #[default]
    Bwrap,
    /// A plain process with the user's rights. Only when set explicitly;
    /// `chitin status` shows it in red.
    None,
}

/// One `[mcp_servers.NAME]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// `false` keeps the entry but starts nothing.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// A remote server's endpoint (`https://…/mcp`). Exactly one of `url`
    /// and `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How the remote server is spoken to.
    #[serde(default, skip_serializing_if = "is_default")]
    pub transport: RemoteTransport,
    /// Headers sent to a remote server. A value may hold `{{secret:NAME}}`,
    /// filled in by the host from `secrets`, for this server's host only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Secret values for `headers` (`${VAR}` is expanded). Never shown to
    /// the model, never logged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// A stdio server's program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment (nothing else of the host's is passed; `${VAR}` is
    /// expanded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Where a stdio server runs: `"bwrap"` (default) or `"none"`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub sandbox: SandboxMode,
    /// More paths a sandboxed stdio server may read (its install directory,
    /// a virtualenv).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_paths: Vec<PathBuf>,
    /// A sandboxed stdio server may use the network.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Seconds one tool call may take.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Seconds a connection may take to come up (start and handshake).
    #[serde(default = "default_startup_timeout_secs")]
    pub startup_timeout_secs: u64,
    /// Only these of the server's tools (by the server's names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `chitin mcp login` for a server that needs OAuth (read by
    /// `crate::mcp::oauth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

/// `[mcp_servers.NAME.oauth]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// A client registered beforehand; without it chitin registers itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Only for a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The scopes asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

fn enabled_by_default() -> bool {
    true
}

fn default_timeout_secs() -> u64 {
    60
}

fn default_startup_timeout_secs() -> u64 {
    20
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl McpServerConfig {
    /// A stdio server running `command args`.
    pub fn stdio(command: &str, args: Vec<String>) -> McpServerConfig {
        McpServerConfig { command: Some(command.to_string()), args, ..McpServerConfig::remote("") }
    }

    /// A remote server at `url`.
    pub fn remote(url: &str) -> McpServerConfig {
        McpServerConfig {
            enabled: true,
            url: (!url.is_empty()).then(|| url.to_string()),
            transport: RemoteTransport::default(),
            headers: BTreeMap::new(),
            secrets: BTreeMap::new(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            sandbox: SandboxMode::default(),
            read_only_paths: Vec::new(),
            network: false,
            timeout_secs: default_timeout_secs(),
            startup_timeout_secs: default_startup_timeout_secs(),
            tools: None,
            oauth: None,
        }
    }

    /// One tool call's limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.max(1))
    }

    /// A connection's limit.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_secs.max(1))
    }

    /// What it is, for `chitin mcp list` and `chitin status`.
    pub fn describe(&self) -> String {
        match (&self.url, &self.command) {
            (Some(url), _) => format!("{} {url}", if self.transport == RemoteTransport::Sse { "sse" } else { "http" }),
            (None, Some(command)) => {
                let sandbox = if self.sandbox == SandboxMode::None { "sandbox = \"none\"" } else { "bwrap" };
                format!("stdio `{}` ({sandbox})", std::iter::once(command.as_str()).chain(self.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" "))
            }
            (None, None) => "(no url or command)".to_string(),
        }
    }

    fn check(&self, server: &str) -> Result<(), McpConfigError> {
        let err = |message: String| Err(McpConfigError { server: server.to_string(), message });
        if !valid_name(server) {
            return err("the name must be 1-32 of a-z, 0-9, `-` and `_` (it becomes part of the tool names)".into());
        }
        match (&self.url, &self.command) {
            (Some(_), Some(_)) => return err("set `url` (a remote server) or `command` (a stdio server), not both".into()),
            (None, None) => return err("set `url` (a remote server) or `command` (a stdio server)".into()),
            (Some(url), None) => {
                let parsed = url.parse::<http::Uri>().map_err(|e| McpConfigError { server: server.into(), message: format!("`url` {url:?} does not parse: {e}") })?;
                if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
                    return err(format!("`url` {url:?} must be an http:// or https:// URL with a host"));
                }
                if !self.args.is_empty() || !self.env.is_empty() || !self.read_only_paths.is_empty() || self.network {
                    return err("`args`, `env`, `read_only_paths` and `network` are for stdio servers (`command`)".into());
                }
            }
            (None, Some(command)) => {
                if command.trim().is_empty() {
                    return err("`command` is empty".into());
                }
                if !self.headers.is_empty() || self.transport != RemoteTransport::default() {
                    return err("`headers` and `transport` are for remote servers (`url`)".into());
                }
            }
        }
        for (name, value) in &self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() || http::HeaderValue::from_str(value).is_err() {
                return err(format!("header `{name}` is not a valid HTTP header"));
            }
        }
        for name in self.secrets.keys() {
            if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') || name.is_empty() {
                return err(format!("secret name `{name}` must be of a-z, 0-9 and `_`"));
            }
        }
        Ok(())
    }
}

/// `[a-z0-9_-]{1,32}`.
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Every `[mcp_servers.NAME]` of the config: the ones that parse and check,
/// and an error for each that does not.
pub fn parse_all(raw: &BTreeMap<String, toml::Value>) -> (Vec<(String, McpServerConfig)>, Vec<McpConfigError>) {
    let mut servers = Vec::new();
    let mut errors = Vec::new();
    for (name, table) in raw {
        match parse_one(name, table) {
            Ok(config) => servers.push((name.clone(), config)),
            Err(e) => errors.push(e),
        }
    }
    (servers, errors)
}

/// One entry.
pub fn parse_one(name: &str, table: &toml::Value) -> Result<McpServerConfig, McpConfigError> {
    let config: McpServerConfig =
        table.clone().try_into().map_err(|e: toml::de::Error| McpConfigError { server: name.to_string(), message: e.message().to_string() })?;
    config.check(name)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<(String, McpServerConfig)>, Vec<McpConfigError>) {
        let config: crate::config::Config = toml::from_str(text).unwrap();
        parse_all(&config.mcp_servers)
    }

    #[test]
    fn a_bad_entry_is_reported_alone_and_names_its_key() {
        let (ok, bad) = parse(
            "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\n\
             [mcp_servers.both]\ncommand = \"x\"\nurl = \"https://a\"\n\
             [mcp_servers.typo]\nurll = \"https://a\"\n\
             [mcp_servers.gh]\nurl = \"https://api.example.com/mcp\"\nheaders = { Authorization = \"Bearer {{secret:token}}\" }\nsecrets = { token = \"${GH}\" }\n",
        );
        let names: Vec<&str> = ok.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["files", "gh"]);
        assert_eq!(ok[0].1.sandbox, SandboxMode::Bwrap, "sandboxed unless said otherwise");
        assert_eq!(bad.len(), 2);
        assert!(bad.iter().any(|e| e.to_string().contains("[mcp_servers.both]") && e.message.contains("not both")), "{bad:?}");
        assert!(bad.iter().any(|e| e.to_string().contains("[mcp_servers.typo]") && e.message.contains("urll")), "{bad:?}");
    }

    #[test]
    fn names_and_urls_are_checked() {
        let (_, bad) = parse("[mcp_servers.\"Bad Name\"]\ncommand = \"x\"\n[mcp_servers.ftp]\nurl = \"ftp://x\"\n");
        assert_eq!(bad.len(), 2, "{bad:?}");
    }
}
