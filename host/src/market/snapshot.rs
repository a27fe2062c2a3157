//! The capability snapshot a user approves (recorded in `chitin.lock`), in
//! words, and what an update adds to it.
//!
//! An update is an escalation, and waits for a person, when it brings any
//! of: a new network host, a higher workspace level, a new privileged host
//! interface, a new import family, a new world, a new secret, a secret sent
//! to a new host or injected in a new place (a path, a named header, query
//! parameter or body field, a frame), a new webhook route. Anything else (fewer
//! capabilities, new tools, new code) is applied: the code was never
//! trusted, only what it may reach.

use serde::{Deserialize, Serialize};

use super::audit::{self, Audit};
use crate::plugins::manifest::channel::{Injection, SecretSpec};
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
    /// Secrets, as `name -> audience in place, place` (places as
    /// [`Injection`] displays them, header names lowercased, sorted;
    /// `name` when it goes nowhere). A lock written before places were
    /// recorded has `name -> audience`: any place is then new.
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
        let mut secrets: Vec<String> =
            manifest.secrets.iter().chain(manifest.channel.iter().flat_map(|c| c.secrets.iter())).map(secret_entry).collect();
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
            lines.push(format!(
                "secret: {} (its value is filled in by the host, sent only to the host named, over https, in the places named)",
                clip_for_terminal(secret, 256, "secret")
            ));
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
        out.extend(secret_escalations(&self.secrets, &new.secrets));
        if new.webhook.is_some() && new.webhook != self.webhook {
            out.push(format!("a new webhook route: {}", clip_for_terminal(new.webhook.as_deref().unwrap_or(""), 128, "route")));
        }
        out
    }
}

/// A secret's snapshot entry; see [`Snapshot::secrets`].
fn secret_entry(spec: &SecretSpec) -> String {
    let Some(audience) = &spec.audience else { return spec.name.clone() };
    let mut places: Vec<String> = spec.inject.iter().map(place_entry).collect();
    places.sort();
    places.dedup();
    if places.is_empty() { format!("{} -> {audience}", spec.name) } else { format!("{} -> {audience} in {}", spec.name, places.join(", ")) }
}

/// A place as recorded: header names lowercased (they match without case).
fn place_entry(place: &Injection) -> String {
    match place {
        Injection::Header(name) => Injection::Header(name.to_ascii_lowercase()).to_string(),
        other => other.to_string(),
    }
}

/// An entry read back: (name, audience, places; `None` when not recorded).
fn parse_entry(entry: &str) -> (&str, Option<&str>, Option<Vec<&str>>) {
    let Some((name, reach)) = entry.split_once(" -> ") else { return (entry, None, None) };
    match reach.split_once(" in ") {
        Some((audience, places)) => (name, Some(audience), Some(places.split(", ").collect())),
        None => (name, Some(reach), None),
    }
}

/// What `new` secrets reach beyond `old`: a new secret, a new audience, a
/// new place, one phrase each.
fn secret_escalations(old: &[String], new: &[String]) -> Vec<String> {
    let shown = |text: &str| clip_for_terminal(text, 256, "secret");
    let mut out = Vec::new();
    for entry in new {
        let (name, audience, places) = parse_entry(entry);
        let Some((_, old_audience, old_places)) = old.iter().map(|e| parse_entry(e)).find(|(n, _, _)| *n == name) else {
            out.push(format!("a new secret: {}", shown(entry)));
            continue;
        };
        if audience.is_some() && audience != old_audience {
            out.push(format!("secret {} sent to a new host: {} (was {})", shown(name), shown(audience.unwrap_or_default()), shown(old_audience.unwrap_or("nowhere"))));
            continue;
        }
        let places = places.unwrap_or_default();
        let added: Vec<&str> = match &old_places {
            Some(old_places) => places.iter().copied().filter(|p| !old_places.contains(p)).collect(),
            None => places,
        };
        if added.is_empty() {
            continue;
        }
        let recorded = if old_places.is_none() { " (the approved version's places were not recorded)" } else { "" };
        out.push(format!("secret {} injected in new places: {}{recorded}", shown(name), shown(&added.join(", "))));
    }
    out
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

    #[test]
    fn a_secret_injected_in_a_new_place_or_sent_to_a_new_host_is_an_escalation() {
        let spec = |inject: Vec<Injection>, audience: &str| SecretSpec { name: "k".into(), audience: Some(audience.into()), inject };
        let entry = |inject, audience| secret_entry(&spec(inject, audience));
        let approved = vec![entry(vec![Injection::Path, Injection::Header("X-Key".into())], "api.example")];
        assert_eq!(approved, ["k -> api.example in header x-key, path"]);
        // Fewer places, the same places in another order or case: applied.
        assert!(secret_escalations(&approved, &[entry(vec![Injection::Header("x-KEY".into()), Injection::Path], "api.example")]).is_empty());
        assert!(secret_escalations(&approved, &[entry(vec![Injection::Path], "api.example")]).is_empty());
        let wider = secret_escalations(&approved, &[entry(vec![Injection::Path, Injection::Query("text".into())], "api.example")]);
        assert_eq!(wider, ["secret k injected in new places: query text"]);
        let moved = secret_escalations(&approved, &[entry(vec![Injection::Path], "evil.example")]);
        assert_eq!(moved, ["secret k sent to a new host: evil.example (was api.example)"]);
        // A lock from before places were recorded: every place is new.
        let legacy = secret_escalations(&["k -> api.example".to_string()], &[entry(vec![Injection::Path], "api.example")]);
        assert_eq!(legacy, ["secret k injected in new places: path (the approved version's places were not recorded)"]);
    }
}
