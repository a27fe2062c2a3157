//! Which world a component implements, read from its top-level exports with
//! a parser pass (no compile), and the manifest rules that depend on it.
//!
//! The host supports several package versions side by side (see
//! [`super::bindings`]); knowing the world before compiling lets `load`
//! refuse a channel component without a `channel` section (or a tool
//! component with one), and lets `prepare` link the matching `InstancePre`.

use std::ops::ControlFlow;

use wasmparser::Payload;

use super::manifest::{Manifest, ManifestError};

/// The export of a 0.1.0 tool plugin.
pub const TOOL_V0_1: &str = "chitin:plugin/tool@0.1.0";
/// The export of a 0.2.0 tool plugin.
pub const TOOL_V0_2: &str = "chitin:plugin/tool@0.2.0";
/// The export of a 0.2.0 channel plugin.
pub const CHANNEL_V0_2: &str = "chitin:plugin/channel@0.2.0";

/// A world the host can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `chitin:plugin@0.1.0` `tool-plugin`.
    ToolV0_1,
    /// `chitin:plugin@0.2.0` `tool-plugin`.
    ToolV0_2,
    /// `chitin:plugin@0.2.0` `channel-plugin`.
    ChannelV0_2,
}

impl World {
    /// The world whose interface `bytes` exports at the top level. A
    /// component exporting none of them, or more than one, is refused with
    /// the exports it has, so a plugin built against an unknown version says
    /// so at load rather than at its first call.
    pub fn detect(bytes: &[u8]) -> Result<World, ManifestError> {
        let mut found: Vec<World> = Vec::new();
        let mut other: Vec<String> = Vec::new();
        let mut bad_export = None;
        super::manifest::walk_sections(bytes, |depth, payload| {
            let Payload::ComponentExportSection(reader) = payload else { return ControlFlow::Continue(()) };
            if depth > 0 {
                return ControlFlow::Continue(());
            }
            for export in reader.clone() {
                let export = match export {
                    Ok(export) => export,
                    Err(e) => {
                        bad_export = Some(e);
                        return ControlFlow::Break(());
                    }
                };
                match export.name.name {
                    TOOL_V0_1 => found.push(World::ToolV0_1),
                    TOOL_V0_2 => found.push(World::ToolV0_2),
                    CHANNEL_V0_2 => found.push(World::ChannelV0_2),
                    name if other.len() < 8 => other.push(name.to_string()),
                    _ => {}
                }
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = bad_export {
            return Err(ManifestError::new(super::manifest::CONTAINER, format!("not a valid WebAssembly component: {e}")));
        }
        match found.as_slice() {
            [world] => Ok(*world),
            [] => Err(ManifestError::new(
                super::manifest::CONTAINER,
                format!(
                    "the component exports none of `{TOOL_V0_1}`, `{TOOL_V0_2}`, `{CHANNEL_V0_2}` (it exports: {}); build it against a chitin:plugin world this host supports",
                    if other.is_empty() { "nothing".to_string() } else { other.join(", ") }
                ),
            )),
            _ => Err(ManifestError::new(super::manifest::CONTAINER, format!("the component implements several worlds at once ({found:?}); a plugin is one world"))),
        }
    }

    /// True for the channel world.
    pub fn is_channel(self) -> bool {
        matches!(self, World::ChannelV0_2)
    }

    /// Checks the manifest against the world: a channel plugin has a
    /// `channel` section, a tool plugin does not.
    pub fn check(self, manifest: &Manifest) -> Result<(), ManifestError> {
        match (self.is_channel(), manifest.channel.is_some()) {
            (true, false) => Err(ManifestError::new("channel", "a channel plugin (it exports chitin:plugin/channel) must have a `channel` section")),
            (false, true) => Err(ManifestError::new("channel", "a tool plugin (it exports chitin:plugin/tool) must not have a `channel` section")),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            World::ToolV0_1 => "tool-plugin@0.1.0",
            World::ToolV0_2 => "tool-plugin@0.2.0",
            World::ChannelV0_2 => "channel-plugin@0.2.0",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{Component, ComponentExportKind, ComponentExportSection, ComponentInstanceSection};

    /// A component exporting one empty instance under each of `names`.
    fn exporting(names: &[&str]) -> Vec<u8> {
        let mut component = Component::new();
        let mut instances = ComponentInstanceSection::new();
        for _ in names {
            instances.export_items(std::iter::empty::<(&str, ComponentExportKind, u32)>());
        }
        component.section(&instances);
        let mut exports = ComponentExportSection::new();
        for (i, name) in names.iter().enumerate() {
            exports.export(*name, ComponentExportKind::Instance, i as u32, None);
        }
        component.section(&exports);
        component.finish()
    }

    #[test]
    fn the_world_is_the_one_chitin_export() {
        assert_eq!(World::detect(&exporting(&[TOOL_V0_1])), Ok(World::ToolV0_1));
        assert_eq!(World::detect(&exporting(&[TOOL_V0_2])), Ok(World::ToolV0_2));
        assert_eq!(World::detect(&exporting(&["wasi:cli/run@0.2.0", CHANNEL_V0_2])), Ok(World::ChannelV0_2));
    }

    #[test]
    fn no_chitin_export_or_several_are_refused_with_what_was_found() {
        let err = World::detect(&exporting(&["chitin:plugin/tool@0.3.0"])).unwrap_err();
        assert!(err.message.contains("chitin:plugin/tool@0.3.0"), "{err}");
        let err = World::detect(&exporting(&[TOOL_V0_1, CHANNEL_V0_2])).unwrap_err();
        assert!(err.message.contains("several worlds"), "{err}");
    }
}
