//! The install-time audit: what a component imports, read with a parser
//! pass (nothing runs), mapped to capabilities in words and checked against
//! what its manifest says it asks for.
//!
//! Families and what they mean:
//! - `wasi:io`, `wasi:clocks`, `wasi:random`, `wasi:cli`: computing, time,
//!   randomness, its own stdout/stderr; nothing outside;
//! - `wasi:filesystem`: the workspace, as far as granted;
//! - `wasi:http`: the network, to the hosts granted;
//! - `wasi:sockets`: raw sockets, never granted (linked so language
//!   toolchains that always import it instantiate; every address refused);
//! - `chitin:plugin/*`: the plugin world and the privileged interfaces, at
//!   a package version this host links;
//! - anything else: refused, it could never be linked.

use std::collections::BTreeSet;

use wasmparser::{Parser, Payload};

use crate::plugins::manifest::{Manifest, WorkspaceAccess};
use crate::plugins::HostInterface;

/// The `chitin:plugin` package versions this host links.
pub const CHITIN_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];

/// What the audit found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audit {
    /// Import families (`wasi:http`, `chitin:plugin`), sorted.
    pub families: BTreeSet<String>,
    /// Privileged interfaces imported (`messaging`, ...).
    pub host: BTreeSet<String>,
    /// Things the reviewer should know that do not stop the install.
    pub notes: Vec<String>,
}

/// Audits `bytes` against `manifest`: Err with every reason to refuse.
pub fn audit(bytes: &[u8], manifest: &Manifest) -> Result<Audit, String> {
    let mut out = Audit::default();
    let mut refusals = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("not a valid component: {e}"))?;
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    let import = import.map_err(|e| format!("not a valid component: {e}"))?;
                    classify(import.name.name, &mut out, &mut refusals);
                }
            }
            _ => {}
        }
    }
    let caps = &manifest.capabilities;
    for asked in &caps.host {
        if !out.host.contains(asked) {
            refusals.push(format!("its manifest asks for the host interface `{asked}` but the component never imports `chitin:plugin/{asked}`: the manifest does not describe this component"));
        }
    }
    for imported in &out.host {
        if !caps.host.contains(imported) {
            out.notes.push(format!("imports `chitin:plugin/{imported}` without asking for it: every call to it will be refused"));
        }
    }
    let http = out.families.contains("wasi:http");
    let secrets_go_out = manifest.secrets.iter().any(|s| s.audience.is_some()) || manifest.channel.as_ref().is_some_and(|c| c.secrets.iter().any(|s| s.audience.is_some()));
    if http && caps.network.is_empty() && !secrets_go_out {
        out.notes.push("imports wasi:http but asks for no network host: its requests will fail".into());
    }
    if !http && !caps.network.is_empty() {
        out.notes.push("asks for network hosts but does not import wasi:http: it cannot use them".into());
    }
    if caps.workspace != WorkspaceAccess::None && !out.families.contains("wasi:filesystem") {
        out.notes.push("asks for the workspace but does not import wasi:filesystem: it cannot use it".into());
    }
    if out.families.contains("wasi:sockets") {
        out.notes.push("imports wasi:sockets (raw sockets): never granted, every socket it tries is refused".into());
    }
    if refusals.is_empty() { Ok(out) } else { Err(refusals.join("; ")) }
}

fn classify(name: &str, out: &mut Audit, refusals: &mut Vec<String>) {
    // `namespace:package/interface@version`.
    let (package, rest) = name.split_once('/').unwrap_or((name, ""));
    let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
    match package {
        "wasi:io" | "wasi:clocks" | "wasi:random" | "wasi:cli" | "wasi:filesystem" | "wasi:http" | "wasi:sockets" => {
            out.families.insert(package.to_string());
        }
        "chitin:plugin" => {
            out.families.insert(package.to_string());
            if !CHITIN_VERSIONS.contains(&version) {
                refusals.push(format!("imports `{name}`: built against chitin:plugin@{version}, this host links {}", CHITIN_VERSIONS.join(", ")));
            } else if let Ok(privileged) = HostInterface::parse(interface) {
                out.host.insert(privileged.name().to_string());
            }
        }
        _ => refusals.push(format!("imports `{}`, which this host does not provide", crate::text::clip_for_terminal(name, 256, "import"))),
    }
}

/// The capability families of `audit`, in words, for the review.
pub fn describe_family(family: &str) -> &'static str {
    match family {
        "wasi:filesystem" => "files (the workspace, as far as granted)",
        "wasi:http" => "the network (the hosts granted)",
        "wasi:sockets" => "raw sockets (never granted)",
        "chitin:plugin" => "the chitin plugin interfaces",
        "wasi:cli" => "its own output and exit",
        "wasi:clocks" => "the time",
        "wasi:random" => "random numbers",
        "wasi:io" => "streams",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::BUILTIN_PLUGINS;

    #[test]
    fn the_builtins_pass_and_map_to_their_capabilities() {
        for &crate::plugins::catalog::Builtin { name, bytes, .. } in BUILTIN_PLUGINS {
            let manifest = Manifest::from_component(bytes).unwrap();
            let audit = audit(bytes, &manifest).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(audit.families.contains("chitin:plugin"), "{name}: {audit:?}");
            if name == "fs" {
                assert!(audit.families.contains("wasi:filesystem"), "{audit:?}");
            }
            if name == "agent" {
                assert_eq!(audit.host.iter().map(String::as_str).collect::<Vec<_>>(), ["agents", "goals", "messaging", "schedule"]);
            }
        }
    }

    #[test]
    fn a_manifest_that_asks_for_an_interface_the_code_never_imports_is_refused() {
        let bytes = crate::plugins::builtin("fs").unwrap().bytes;
        let mut manifest = Manifest::from_component(bytes).unwrap();
        manifest.capabilities.host = vec!["messaging".into()];
        let e = audit(bytes, &manifest).unwrap_err();
        assert!(e.contains("asks for the host interface `messaging`"), "{e}");
    }

    #[test]
    fn unknown_packages_and_versions_are_refused() {
        let mut out = Audit::default();
        let mut refusals = Vec::new();
        classify("evil:thing/x@1.0.0", &mut out, &mut refusals);
        classify("chitin:plugin/host@0.9.0", &mut out, &mut refusals);
        classify("wasi:http/outgoing-handler@0.2.6", &mut out, &mut refusals);
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert!(refusals[0].contains("does not provide") && refusals[1].contains("0.9.0"));
        assert!(out.families.contains("wasi:http"));
    }
}
