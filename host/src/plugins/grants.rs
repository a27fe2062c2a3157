//! Grants: what a plugin is actually allowed, computed from what its manifest
//! asks for and what the user's config allows.
//!
//! The rule is "the lesser of the two": a plugin never gets a capability it did
//! not declare (so `inspect` tells the whole truth about it), and never more
//! than the user granted. Grants come only from the user's config; nothing a
//! plugin or the model says can widen them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::manifest::{Capabilities, WorkspaceAccess};
use super::services::HostInterface;

/// What the user's config says about one plugin (`[plugins.<name>]`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// Workspace access granted; absent means none.
    #[serde(default)]
    pub workspace: WorkspaceAccess,
    /// Hosts granted for outgoing HTTP.
    #[serde(default)]
    pub network: Vec<String>,
    /// Privileged host interfaces granted (`messaging`, ...).
    #[serde(default)]
    pub host: Vec<String>,
    /// Chats other than the current one the plugin may send to through
    /// `messaging`: `"channel:chat"`, `"channel:*"` or `"*"`.
    #[serde(default)]
    pub chats: Vec<String>,
    /// Set to `false` to keep the plugin from loading at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Values of the secrets a tool plugin declares (`[plugins.<name>.secrets]`,
    /// `NAME = "${ENV_VAR}"`); see [`super::configured`].
    #[serde(default, skip_serializing_if = "SecretValues::is_empty")]
    pub secrets: SecretValues,
    /// Settings the component reads (`[plugins.<name>.settings]`), handed to
    /// it as JSON in the `CHITIN_PLUGIN_SETTINGS` environment variable; never
    /// a secret (the component sees them), so `${VAR}` is refused there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, serde_json::Value>,
    /// A platform host (a declared secret's audience) served elsewhere:
    /// `api_base = { "api.search.brave.com" = "http://127.0.0.1:8080" }`
    /// (a test server, a proxy). At most one entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_base: BTreeMap<String, String>,
}

/// Secret values as written in the config; `Debug` shows only the names.
#[derive(Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct SecretValues(pub BTreeMap<String, String>);

impl SecretValues {
    /// True when no secret is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

fn default_true() -> bool {
    true
}

impl Default for GrantConfig {
    /// Nothing granted; the plugin loads.
    fn default() -> Self {
        GrantConfig {
            workspace: WorkspaceAccess::None,
            network: Vec::new(),
            host: Vec::new(),
            chats: Vec::new(),
            enabled: true,
            secrets: SecretValues::default(),
            settings: BTreeMap::new(),
            api_base: BTreeMap::new(),
        }
    }
}

/// The effective grant of a loaded plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    /// How the workspace is preopened, if at all.
    pub workspace: WorkspaceAccess,
    /// Hosts the plugin may reach over `wasi:http`.
    pub network: Vec<HostPattern>,
    /// Privileged host interfaces it may call.
    pub host: Vec<HostInterface>,
    /// Other chats `messaging` may send to (only with `messaging` granted).
    pub chats: Vec<String>,
}

impl Grant {
    /// Intersects a manifest's request with the user's config. Returns the
    /// grant and one note per capability that was asked for but not granted.
    pub fn resolve(plugin: &str, asked: &Capabilities, config: &GrantConfig) -> (Grant, Vec<String>) {
        let mut notes = Vec::new();
        let workspace = asked.workspace.min(config.workspace);
        if workspace < asked.workspace {
            notes.push(format!(
                "asks for workspace `{}`, granted `{}` (set `workspace = \"{}\"` under [plugins.{plugin}] to allow it)",
                asked.workspace, workspace, asked.workspace
            ));
        }
        let granted: Vec<HostPattern> = config.network.iter().filter_map(|h| HostPattern::parse(h).ok()).collect();
        let mut network = Vec::new();
        for host in &asked.network {
            let Ok(wanted) = HostPattern::parse(host) else { continue };
            let admitted: Vec<HostPattern> = granted.iter().filter_map(|g| wanted.intersect(g)).collect();
            if !admitted.is_empty() {
                network.extend(admitted);
            } else {
                notes.push(format!(
                    "asks for network host `{host}`, not granted (add \"{host}\" to `network` under [plugins.{plugin}] to allow it)"
                ));
            }
        }
        let mut host = Vec::new();
        for name in &asked.host {
            let Ok(interface) = HostInterface::parse(name) else { continue };
            if config.host.iter().any(|g| g == name) {
                host.push(interface);
            } else {
                notes.push(format!(
                    "asks for host interface `{name}` ({}), not granted (add \"{name}\" to `host` under [plugins.{plugin}] to allow it)",
                    interface.describe()
                ));
            }
        }
        let chats = if host.contains(&HostInterface::Messaging) { config.chats.clone() } else { Vec::new() };
        (Grant { workspace, network, host, chats }, notes)
    }

    /// Finds the granted pattern that admits `host:port`, if any.
    pub fn admits(&self, host: &str, port: u16) -> Option<&HostPattern> {
        best_match(&self.network, host, port)
    }
}

/// A granted destination: `example.com`, `*.example.com`, `10.0.0.5:8080`,
/// `[::1]:80`, or `*` (any host, e.g. for `web_fetch`; private and loopback
/// addresses still need a grant that names the address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// Lower-case host name or IP literal; a leading `*.` matches any subdomain.
    host: String,
    /// `None` admits any port.
    port: Option<u16>,
}

impl HostPattern {
    /// Parses a grant entry; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let text = text.trim();
        if text.contains("://") || text.contains('/') {
            return Err(format!("`{text}` must be a host or host:port, not a URL"));
        }
        let (host, port) = split_host_port(text).ok_or_else(|| format!("`{text}` has an invalid port"))?;
        let bare = host.strip_prefix("*.").unwrap_or(&host);
        let valid = host == ANY
            || !bare.is_empty()
            && (bare.parse::<IpAddr>().is_ok()
                || bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !valid {
            return Err(format!("`{text}` is not a valid host name"));
        }
        Ok(HostPattern { host: host.to_ascii_lowercase(), port })
    }

    /// True when a request to `host:port` falls under this pattern.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.matches_host(host)
    }

    /// True when this pattern names `host` (on some port).
    pub fn matches_host(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        if self.host == ANY {
            return !host.is_empty();
        }
        match self.host.strip_prefix("*.") {
            Some(suffix) => host.strip_suffix(suffix).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => host == self.host,
        }
    }

    /// The destinations admitted by both patterns, if any: `*.example.com`
    /// and `api.example.com:443` give `api.example.com:443`.
    pub fn intersect(&self, other: &HostPattern) -> Option<HostPattern> {
        let port = match (self.port, other.port) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        let under = |wide: &HostPattern, narrow: &HostPattern| {
            wide.host.starts_with("*.") && wide.matches_host(narrow.host.trim_start_matches("*."))
        };
        let host = if self.host == other.host || under(other, self) || other.host == ANY {
            self.host.clone()
        } else if self.host == ANY {
            other.host.clone()
        } else if under(self, other) {
            other.host.clone()
        } else {
            return None;
        };
        Some(HostPattern { host, port })
    }

    /// A pattern that names a private destination on purpose: an IP literal
    /// or `localhost`. Only such a grant lets a request reach loopback or
    /// private addresses; a host *name* that resolves to one is refused, which
    /// defeats DNS rebinding onto the user's own network.
    pub fn names_address(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok()
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bracket = self.host.contains(':');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

/// The pattern of `granted` that admits `host:port`, preferring one that
/// names the address: with `*` and `127.0.0.1:8080` both granted, a request
/// to `127.0.0.1:8080` is admitted by the second, which allows a private
/// address, whatever the order of the config list.
pub fn best_match<'a>(granted: &'a [HostPattern], host: &str, port: u16) -> Option<&'a HostPattern> {
    let mut matching = granted.iter().filter(|p| p.matches(host, port));
    let first = matching.next()?;
    Some(std::iter::once(first).chain(matching).find(|p| p.names_address()).unwrap_or(first))
}

/// The pattern that admits any host.
const ANY: &str = "*";

/// Splits `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 literal.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    if text.parse::<IpAddr>().is_ok() {
        return Some((text.to_string(), None));
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), Some(port.parse().ok()?))),
        None => Some((text.to_string(), None)),
    }
}

/// Addresses a plugin must not reach unless the user named them: loopback,
/// private ranges, link-local (cloud metadata lives there), unspecified.
pub fn is_private(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified()
                || v4.is_broadcast() || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64 // CGNAT
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let seg0 = v6.segments()[0];
            v6.is_loopback() || v6.is_unspecified() || (seg0 & 0xfe00) == 0xfc00 || (seg0 & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(workspace: WorkspaceAccess, network: &[&str]) -> Capabilities {
        Capabilities { workspace, network: network.iter().map(|s| s.to_string()).collect(), host: vec![] }
    }

    #[test]
    fn the_lesser_workspace_wins_and_is_reported() {
        let config = GrantConfig { workspace: WorkspaceAccess::Read, ..Default::default() };
        let (grant, notes) = Grant::resolve("fs", &caps(WorkspaceAccess::ReadWrite, &[]), &config);
        assert_eq!(grant.workspace, WorkspaceAccess::Read);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("[plugins.fs]"), "{notes:?}");

        let config = GrantConfig { workspace: WorkspaceAccess::ReadWrite, ..Default::default() };
        let (grant, notes) = Grant::resolve("x", &caps(WorkspaceAccess::None, &[]), &config);
        assert_eq!(grant.workspace, WorkspaceAccess::None, "never more than asked");
        assert!(notes.is_empty());
    }

    #[test]
    fn network_needs_both_ask_and_grant() {
        let config = GrantConfig { network: vec!["*.example.com".into(), "127.0.0.1:8080".into()], ..Default::default() };
        let asked = caps(WorkspaceAccess::None, &["api.example.com", "127.0.0.1", "10.0.0.1:9090", "evil.com"]);
        let (grant, notes) = Grant::resolve("web", &asked, &config);
        let granted: Vec<String> = grant.network.iter().map(|p| p.to_string()).collect();
        assert_eq!(granted, ["api.example.com", "127.0.0.1:8080"], "asked any port, granted one: that one");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(grant.admits("api.example.com", 443).is_some());
        assert!(grant.admits("API.EXAMPLE.COM", 80).is_some());
        assert!(grant.admits("example.com", 443).is_none());
        assert!(grant.admits("127.0.0.1", 8081).is_none());
    }

    #[test]
    fn intersections() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        let show = |x: Option<HostPattern>| x.map(|h| h.to_string());
        assert_eq!(show(p("*.example.com").intersect(&p("api.example.com:443"))).as_deref(), Some("api.example.com:443"));
        assert_eq!(show(p("api.example.com").intersect(&p("*.example.com"))).as_deref(), Some("api.example.com"));
        assert_eq!(show(p("*.a.example.com").intersect(&p("*.example.com"))).as_deref(), Some("*.a.example.com"));
        assert_eq!(show(p("example.com").intersect(&p("*.example.com"))), None);
        assert_eq!(show(p("x.com:80").intersect(&p("x.com:81"))), None);
    }

    #[test]
    fn any_host() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        let show = |x: Option<HostPattern>| x.map(|h| h.to_string());
        assert!(p("*").matches("example.com", 443));
        assert!(p("*").matches("127.0.0.1", 80));
        assert!(!p("*").names_address(), "`*` never admits a private address by itself");
        assert!(p("*:443").matches("x.org", 443) && !p("*:443").matches("x.org", 80));
        assert_eq!(show(p("*").intersect(&p("api.example.com"))).as_deref(), Some("api.example.com"));
        assert_eq!(show(p("127.0.0.1:8080").intersect(&p("*"))).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(show(p("*").intersect(&p("*"))).as_deref(), Some("*"));
        assert!(HostPattern::parse("**").is_err() && HostPattern::parse("*.").is_err());
        let config = GrantConfig { network: vec!["*".into(), "127.0.0.1:9".into()], ..Default::default() };
        let (grant, notes) = Grant::resolve("web", &caps(WorkspaceAccess::None, &["*"]), &config);
        assert!(notes.is_empty(), "{notes:?}");
        assert!(grant.admits("anything.example", 443).is_some());
        assert!(grant.admits("127.0.0.1", 9).is_some_and(HostPattern::names_address));
    }

    #[test]
    fn patterns() {
        let p = HostPattern::parse("*.example.com").unwrap();
        assert!(p.matches("a.example.com", 1));
        assert!(p.matches("a.b.example.com", 1));
        assert!(!p.matches("example.com", 1));
        assert!(!p.matches("badexample.com", 1));
        assert!(HostPattern::parse("https://x.com").is_err());
        assert!(HostPattern::parse("x.com:notaport").is_err());
        assert!(HostPattern::parse("[::1]:80").unwrap().matches("[::1]", 80));
        assert!(HostPattern::parse("127.0.0.1").unwrap().names_address());
        assert!(!HostPattern::parse("example.com").unwrap().names_address());
    }

    #[test]
    fn private_ranges() {
        for a in ["127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.169.254", "0.0.0.0", "::1", "fd00::1", "fe80::1", "::ffff:127.0.0.1", "100.64.0.1"] {
            assert!(is_private(a.parse().unwrap()), "{a}");
        }
        for a in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_private(a.parse().unwrap()), "{a}");
        }
    }
}
