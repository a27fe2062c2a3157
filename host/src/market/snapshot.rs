//! The capability snapshot a user approves (recorded in `chitin.lock`), in
//! words, and what an update adds to it.
//!
//! An update is an escalation, and waits for a person, when it brings any
//! of: a new network host, a higher workspace level, a new privileged host
//! interface, a new import family, a new world, a new secret (or a secret
//! sent to a new host), a new webhook route. Anything else (fewer
//! capabilities, new tools, new code) is applied: the code was never
//! trusted, only what it may reach.

use serde::{Deserialize, Serialize};

use super::audit::{self, Audit};
use crate::plugins::manifest::{Manifest, WorkspaceAccess};
use crate::plugins::{GrantConfig, HostInterface};
use crate::text::clip_for_terminal;

/// What a plugin may touch, as approved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// The world it exports (`chitin:plugin/tool@0.2.0`).
    pub world: String,
    /// Workspace access.
    #[serde(default)]
    pub workspace: WorkspaceAccess,
    /// Network hosts.
    #[serde(default)]
    pub network: Vec<String>,
    /// Privileged host interfaces.
    #[serde(default)]
    pub host: Vec<String>,
    /// Import families (`wasi:http`, ...).
    #[serde(default)]
    pub imports: Vec<String>,
    /// Secrets, as `name -> audience` (`name` when it goes nowhere).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// A channel's webhook route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
}

impl Snapshot {
    /// The snapshot of a component with `manifest`, `world` and `audit`.
    pub fn of(manifest: &Manifest, world: &str, audit: &Audit) -> Snapshot {
        let caps = &manifest.capabilities;
        let mut secrets: Vec<String> = manifest
            .secrets
            .iter()
            .chain(manifest.channel.iter().flat_map(|c| c.secrets.iter()))
            .map(|s| match &s.audience {
                Some(a) => format!("{} -> {a}", s.name),
                None => s.name.clone(),
            })
            .collect();
        secrets.sort();
        secrets.dedup();
        let mut network = caps.network.clone();
        network.sort();
        let mut host = caps.host.clone();
        host.sort();
        Snapshot {
            world: world.to_string(),
            workspace: caps.workspace,
            network,
            host,
            imports: audit.families.iter().cloned().collect(),
            secrets,
            webhook: manifest.channel.as_ref().and_then(|c| c.webhook.as_ref()).map(|w| w.route.clone()),
        }
    }

    /// The grant a marketplace plugin gets when the config has no
    /// `[plugins.<name>]` table: exactly what was approved.
    pub fn grant(&self) -> GrantConfig {
        GrantConfig { workspace: self.workspace, network: self.network.clone(), host: self.host.clone(), ..GrantConfig::default() }
    }

    /// What it may touch, one line each, in words. Every string came from
    /// the plugin: escaped and bounded.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.push(format!("world: {}", clip_for_terminal(&self.world, 128, "world")));
        lines.push(match self.workspace {
            WorkspaceAccess::None => "workspace: none".to_string(),
            WorkspaceAccess::Read => "workspace: read files in your workspace".to_string(),
            WorkspaceAccess::ReadWrite => "workspace: read, create, change and delete files in your workspace".to_string(),
        });
        if self.network.is_empty() {
            lines.push("network: none".into());
        } else {
            for host in &self.network {
                let shown = clip_for_terminal(host, 256, "host");
                lines.push(if host == "*" { "network: any public host on the internet".to_string() } else { format!("network: HTTP requests to {shown}") });
            }
        }
        for name in &self.host {
            let what = HostInterface::parse(name).map(|i| i.describe()).unwrap_or("an interface this host does not have");
            lines.push(format!("host interface {}: {what}", clip_for_terminal(name, 64, "name")));
        }
        for secret in &self.secrets {
            lines.push(format!("secret: {} (its value is filled in by the host, sent only to the host named)", clip_for_terminal(secret, 256, "secret")));
        }
        if let Some(route) = &self.webhook {
            lines.push(format!("webhook: receives requests on {}", clip_for_terminal(route, 128, "route")));
        }
        let imports: Vec<String> = self.imports.iter().map(|f| format!("{f} ({})", audit::describe_family(f))).collect();
        lines.push(format!("imports: {}", if imports.is_empty() { "nothing".into() } else { imports.join(", ") }));
        lines
    }

    /// What `new` has that `self` (the approved snapshot) does not, one
    /// phrase each; empty when `new` is not an escalation.
    pub fn escalations(&self, new: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        if new.world != self.world {
            out.push(format!("a new world: {} (was {})", new.world, self.world));
        }
        if new.workspace > self.workspace {
            out.push(format!("workspace {} (was {})", new.workspace, self.workspace));
        }
        let added = |old: &[String], new: &[String]| new.iter().filter(|x| !old.contains(x)).cloned().collect::<Vec<_>>();
        for host in added(&self.network, &new.network) {
            out.push(format!("a new network host: {}", clip_for_terminal(&host, 256, "host")));
        }
        for name in added(&self.host, &new.host) {
            out.push(format!("a new host interface: {}", clip_for_terminal(&name, 64, "name")));
        }
        for family in added(&self.imports, &new.imports) {
            out.push(format!("a new import family: {family}"));
        }
        for secret in added(&self.secrets, &new.secrets) {
            out.push(format!("a new secret: {}", clip_for_terminal(&secret, 256, "secret")));
        }
        if new.webhook.is_some() && new.webhook != self.webhook {
            out.push(format!("a new webhook route: {}", clip_for_terminal(new.webhook.as_deref().unwrap_or(""), 128, "route")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_more_reach_is_an_escalation() {
        let old = Snapshot { world: "w".into(), workspace: WorkspaceAccess::Read, network: vec!["a.example".into()], imports: vec!["wasi:http".into()], ..Snapshot::default() };
        let less = Snapshot { workspace: WorkspaceAccess::None, network: vec![], ..old.clone() };
        assert!(old.escalations(&less).is_empty());
        let more = Snapshot {
            workspace: WorkspaceAccess::ReadWrite,
            network: vec!["a.example".into(), "b.example".into()],
            host: vec!["messaging".into()],
            imports: vec!["wasi:http".into(), "wasi:sockets".into()],
            world: "w2".into(),
            secrets: vec!["k -> b.example".into()],
            webhook: Some("/hook".into()),
        };
        let found = old.escalations(&more);
        assert_eq!(found.len(), 7, "{found:?}");
    }
}
