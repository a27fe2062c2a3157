//! The plugin manifest: what a component says it offers and asks for.
//!
//! The manifest is JSON in a custom section named [`SECTION_NAME`]. It is read
//! with a parser pass over the binary, so nothing of the plugin runs before the
//! host has validated it. The format is documented in `wit/README.md`.
//!
//! This module owns parsing, validation and packing (embedding a manifest into
//! a component built in any language). It does not decide grants: a manifest
//! only *asks*; see [`super::grants`]. A channel plugin's `channel` section has
//! its own module, [`channel`].

pub mod channel;

pub use channel::ChannelSpec;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ops::ControlFlow;

use wasmparser::{Parser, Payload};

/// Name of the custom section that carries the manifest.
pub const SECTION_NAME: &str = "chitin:manifest";

/// The manifest format version this host understands.
pub const MANIFEST_VERSION: u32 = 1;

/// Longest plugin or tool name; OpenAI-compatible APIs cap function names at 64.
const MAX_NAME_LEN: usize = 64;

/// A plugin's self-description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format version; must equal [`MANIFEST_VERSION`].
    pub manifest_version: u32,
    /// Plugin name, also the key of `[plugins.<name>]` in the config.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One line for humans.
    #[serde(default)]
    pub description: String,
    /// The tools the plugin exports through `chitin:plugin/tool.invoke`;
    /// none for a channel plugin.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// What the plugin asks to be granted.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// A tool plugin's secrets, referred to as `{{secret:NAME}}` in its
    /// `wasi:http` requests and filled in by the host for the audience only
    /// (values from `[plugins.<name>.secrets]`). A channel declares its own
    /// in `channel.secrets`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<channel::SecretSpec>,
    /// A channel plugin's receive modes, secrets, webhook and limits; absent
    /// for a tool plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelSpec>,
}

/// One tool as the model will see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Function name given to the model.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// The tool changes nothing; its result only informs.
    #[serde(default)]
    pub read_only: bool,
    /// The tool may run in parallel with other concurrency-safe calls.
    #[serde(default)]
    pub concurrency_safe: bool,
}

/// Capabilities a plugin asks for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Access to the agent's workspace directory.
    #[serde(default)]
    pub workspace: WorkspaceAccess,
    /// Hosts (`host` or `host:port`) reachable through `wasi:http`.
    #[serde(default)]
    pub network: Vec<String>,
    /// Privileged host interfaces (`messaging`, ...; see `plugins::services`).
    #[serde(default)]
    pub host: Vec<String>,
}

/// How much of the workspace a plugin may touch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceAccess {
    /// The plugin sees no filesystem at all.
    #[default]
    None,
    /// The workspace is preopened read-only.
    Read,
    /// The workspace is preopened read-write.
    ReadWrite,
}

impl WorkspaceAccess {
    /// The config spelling of this access level.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceAccess::None => "none",
            WorkspaceAccess::Read => "read",
            WorkspaceAccess::ReadWrite => "read-write",
        }
    }
}

impl std::fmt::Display for WorkspaceAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A manifest that could not be read or is not acceptable. `field` names the
/// offending part (`tools[2].parameters`), so the plugin author knows where to look.
///
/// Its text is one line: a wasmparser message (which can span lines) is
/// folded, and a problem with the file itself (not WebAssembly, a core
/// module, truncated) says so without the "invalid manifest" prefix.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}", self.text())]
pub struct ManifestError {
    /// Path of the offending field; `section` for the manifest section as a
    /// whole (not JSON, missing), [`CONTAINER`] for the file around it.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// The `field` of a [`ManifestError`] about the file rather than the
/// manifest: not WebAssembly, not a component, truncated.
pub const CONTAINER: &str = "component";

impl ManifestError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ManifestError { field: field.into(), message: one_line(&message.into()) }
    }

    fn container(message: impl Into<String>) -> Self {
        ManifestError::new(CONTAINER, message)
    }

    fn text(&self) -> String {
        if self.field == CONTAINER {
            self.message.clone()
        } else {
            format!("invalid plugin manifest: {}: {}", self.field, self.message)
        }
    }
}

/// Folds runs of whitespace (newlines included) into one space.
fn one_line(text: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_string();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `\0asm`, the first four bytes of every WebAssembly binary.
const MAGIC: &[u8; 4] = b"\0asm";

/// Checks the 8-byte preamble: WebAssembly at all, and a component rather
/// than a core module. The rest is left to the parser.
fn check_preamble(bytes: &[u8]) -> Result<(), ManifestError> {
    if bytes.is_empty() {
        return Err(ManifestError::container("not a WebAssembly component: the file is empty"));
    }
    let n = bytes.len().min(MAGIC.len());
    if bytes[..n] != MAGIC[..n] {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(ManifestError::container(format!(
            "not a WebAssembly component: not a valid WebAssembly binary (it starts with bytes {}; expected \\0asm)",
            head.join(" ")
        )));
    }
    if bytes.len() < 8 {
        return Err(ManifestError::container(format!("not a WebAssembly component: the file is truncated ({} bytes)", bytes.len())));
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        return Err(ManifestError::container(
            "a core WebAssembly module, not a component: turn it into one (e.g. `wasm-tools component new`), then embed a manifest with `chitin plugin pack`",
        ));
    }
    Ok(())
}

/// A parser error as one line saying what is wrong with the file.
fn parse_error(e: &wasmparser::BinaryReaderError) -> ManifestError {
    let text = e.to_string();
    if text.contains("unexpected end-of-file") {
        ManifestError::container(format!("the WebAssembly component is truncated or corrupt: {text}"))
    } else {
        ManifestError::container(format!("not a valid WebAssembly component: {text}"))
    }
}

impl Manifest {
    /// Parses manifest JSON and validates it.
    pub fn from_json(text: &[u8]) -> Result<Manifest, ManifestError> {
        Self::parse(text, true)
    }

    fn parse(text: &[u8], compile_schemas: bool) -> Result<Manifest, ManifestError> {
        let manifest: Manifest = serde_json::from_slice(text)
            .map_err(|e| ManifestError::new(json_error_field(&e), e.to_string()))?;
        manifest.check(compile_schemas)?;
        Ok(manifest)
    }

    /// The manifest of a first-party plugin (one compiled into the binary):
    /// every rule is checked except compiling each tool's parameter schema,
    /// which costs a start about 1 ms and 3 MB of resident memory (the
    /// JSON Schema meta-schemas) for tools the run may never call. Those
    /// schemas are fixed at build time and compiled by the test
    /// `every_builtin_manifest_passes_the_full_check`; the tool registry
    /// compiles a tool's schema at its first call anyway, and refuses the
    /// call if it does not compile.
    pub(crate) fn from_builtin_component(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let section = find_section(bytes)?.ok_or_else(|| ManifestError::container(format!("a built-in plugin without a `{SECTION_NAME}` custom section")))?;
        Self::parse(section, false)
    }

    /// Reads the manifest embedded in a component without compiling it.
    pub fn from_component(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let section = find_section(bytes)?
            .ok_or_else(|| ManifestError::container(format!("a component without a `{SECTION_NAME}` custom section: embed a manifest with `chitin plugin pack`")))?;
        Manifest::from_json(section)
    }

    /// Checks every rule of `wit/README.md`; the first violation is returned.
    pub fn validate(&self) -> Result<(), ManifestError> {
        self.check(true)
    }

    /// [`Manifest::validate`], compiling the tools' parameter schemas or not.
    fn check(&self, compile_schemas: bool) -> Result<(), ManifestError> {
        if self.manifest_version != MANIFEST_VERSION {
            return Err(ManifestError::new(
                "manifest_version",
                format!("{} is not supported (this host reads version {MANIFEST_VERSION})", self.manifest_version),
            ));
        }
        check_name("name", &self.name, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-', |c| c.is_ascii_lowercase())?;
        if self.version.trim().is_empty() {
            return Err(ManifestError::new("version", "must not be empty"));
        }
        match &self.channel {
            Some(_) if !self.tools.is_empty() => {
                return Err(ManifestError::new("tools", "a channel plugin exports no tools (the channel world has no `tool` interface)"));
            }
            None if self.tools.is_empty() => {
                return Err(ManifestError::new("tools", "a plugin must export at least one tool"));
            }
            _ => {}
        }
        let mut seen = std::collections::HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            let field = format!("tools[{i}]");
            check_name(&format!("{field}.name"), &tool.name, |c| c.is_ascii_alphanumeric() || c == '_' || c == '-', |c| c.is_ascii_alphabetic())?;
            if !seen.insert(tool.name.as_str()) {
                return Err(ManifestError::new(format!("{field}.name"), format!("duplicate tool name `{}`", tool.name)));
            }
            check_parameters(&format!("{field}.parameters"), &tool.parameters, compile_schemas)?;
        }
        for (i, host) in self.capabilities.network.iter().enumerate() {
            super::grants::HostPattern::parse(host)
                .map_err(|e| ManifestError::new(format!("capabilities.network[{i}]"), e))?;
        }
        let mut interfaces = std::collections::HashSet::new();
        for (i, name) in self.capabilities.host.iter().enumerate() {
            let field = format!("capabilities.host[{i}]");
            let interface = super::services::HostInterface::parse(name).map_err(|e| ManifestError::new(&field, e))?;
            if !interfaces.insert(interface) {
                return Err(ManifestError::new(field, format!("`{name}` is listed twice")));
            }
        }
        if let Some(channel) = &self.channel {
            channel.validate(&self.capabilities)?;
        }
        if !self.secrets.is_empty() && self.channel.is_some() {
            return Err(ManifestError::new("secrets", "a channel plugin declares its secrets in channel.secrets"));
        }
        channel::validate_secrets("secrets", &self.secrets, &self.capabilities, Some("`frame` is a channel's socket frame; a tool plugin has none"))?;
        for (i, secret) in self.secrets.iter().enumerate() {
            // A tool plugin has no webhook to verify: a secret is only ever
            // injected into its requests.
            if let Some(j) = secret.inject.iter().position(|p| matches!(p, channel::Injection::Field(_))) {
                return Err(ManifestError::new(
                    format!("secrets[{i}].inject[{j}]"),
                    r#"a tool plugin's secret goes in the "path", a {"header": NAME} or a {"query": NAME}; `wasi:http` request bodies are streamed and never rewritten"#,
                ));
            }
            if secret.inject.is_empty() {
                return Err(ManifestError::new(
                    format!("secrets[{i}]"),
                    format!("secret `{}` is not injected anywhere (give its `audience` and `inject`)", secret.name),
                ));
            }
        }
        Ok(())
    }

    /// Finds a tool by name.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }
}

fn check_name(
    field: &str,
    name: &str,
    allowed: impl Fn(char) -> bool,
    first: impl Fn(char) -> bool,
) -> Result<(), ManifestError> {
    let Some(head) = name.chars().next() else {
        return Err(ManifestError::new(field, "must not be empty"));
    };
    if name.len() > MAX_NAME_LEN {
        return Err(ManifestError::new(field, format!("`{name}` is longer than {MAX_NAME_LEN} characters")));
    }
    if !first(head) {
        return Err(ManifestError::new(field, format!("`{name}` must start with a letter")));
    }
    if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        return Err(ManifestError::new(field, format!("`{name}` contains `{bad}`")));
    }
    Ok(())
}

fn check_parameters(field: &str, schema: &Value, compile: bool) -> Result<(), ManifestError> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ManifestError::new(field, "must be a JSON Schema with \"type\": \"object\""));
    }
    if !compile {
        return Ok(());
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| ManifestError::new(field, format!("schema does not compile: {e}")))
}

/// serde_json reports line/column, not a path; naming the whole manifest is
/// the best we can do, but unknown/missing field messages already name it.
fn json_error_field(_e: &serde_json::Error) -> &'static str {
    "section"
}

/// Returns the manifest section's bytes: the top-level one if present,
/// otherwise the first one nested in a core module.
pub fn find_section(bytes: &[u8]) -> Result<Option<&[u8]>, ManifestError> {
    check_preamble(bytes)?;
    let mut nested = None;
    let mut top = None;
    walk_sections(bytes, |depth, payload| {
        if let Payload::CustomSection(reader) = payload
            && reader.name() == SECTION_NAME
        {
            if depth == 0 {
                top = Some(reader.data());
                return ControlFlow::Break(());
            }
            nested.get_or_insert(reader.data());
        }
        ControlFlow::Continue(())
    })?;
    Ok(top.or(nested))
}

/// Calls `visit` with each section of `bytes` and the depth it is nested at
/// (0 = the component itself), stopping when it breaks, without reading the
/// function bodies. Reading what a plugin declares must not read the whole
/// component: for a built-in, every page read is resident memory of the
/// process (the bytes are the binary's own), and `fs` is 2.75 MB of mostly
/// code. A code section that claims more bytes than there are is an error.
pub(super) fn walk_sections<'a>(bytes: &'a [u8], mut visit: impl FnMut(usize, &Payload<'a>) -> ControlFlow<()>) -> Result<(), ManifestError> {
    use wasmparser::Chunk;
    let mut parser = Parser::new(0);
    let mut stack = Vec::new();
    let mut data = bytes;
    loop {
        let (payload, consumed) = match parser.parse(data, true).map_err(|e| parse_error(&e))? {
            Chunk::Parsed { payload, consumed } => (payload, consumed),
            Chunk::NeedMoreData(_) => unreachable!("eof is true: the parser reports truncation as an error"),
        };
        data = &data[consumed..];
        if visit(stack.len(), &payload).is_break() {
            return Ok(());
        }
        match payload {
            Payload::CodeSectionStart { size, .. } => {
                let size = size as usize;
                if size > data.len() {
                    return Err(ManifestError::container(format!(
                        "the WebAssembly component is truncated or corrupt: a code section of {size} bytes with {} left",
                        data.len()
                    )));
                }
                parser.skip_section();
                data = &data[size..];
            }
            Payload::ModuleSection { parser: inner, .. } | Payload::ComponentSection { parser: inner, .. } => {
                stack.push(std::mem::replace(&mut parser, inner));
            }
            Payload::End(_) => match stack.pop() {
                Some(outer) => parser = outer,
                None => return Ok(()),
            },
            _ => {}
        }
    }
}

/// True when `bytes` is a component rather than a core module.
pub fn is_component(bytes: &[u8]) -> bool {
    matches!(Parser::new(0).parse_all(bytes).next(), Some(Ok(Payload::Version { encoding: wasmparser::Encoding::Component, .. })))
}

/// Returns `component` with `manifest` as its top-level manifest section,
/// replacing an earlier top-level one. The manifest is validated first.
pub fn pack(component: &[u8], manifest: &Manifest) -> Result<Vec<u8>, ManifestError> {
    manifest.validate()?;
    if !is_component(component) {
        return Err(ManifestError::container("input is not a WebAssembly component (a core module must be turned into a component first, e.g. with `wasm-tools component new`)"));
    }
    let json = serde_json::to_vec(manifest).expect("a manifest always serializes");
    let mut out = wasm_encoder::Component::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(component) {
        let payload = payload.map_err(|e| parse_error(&e))?;
        let top_level = depth == 0;
        match &payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => {
                depth = depth.saturating_sub(1);
                continue;
            }
            Payload::Version { .. } => continue,
            Payload::CustomSection(reader) if top_level && reader.name() == SECTION_NAME => continue,
            _ => {}
        }
        if top_level {
            if let Some((id, range)) = payload.as_section() {
                out.section(&wasm_encoder::RawSection { id, data: &component[range] });
            }
        }
    }
    out.section(&wasm_encoder::CustomSection { name: SECTION_NAME.into(), data: json.into() });
    Ok(out.finish())
}

/// Why a `plugin.toml` could not become a [`Manifest`]; each names the file.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum FromTomlError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    /// The file is not TOML.
    #[error("{} is not valid TOML", path.display())]
    Toml { path: std::path::PathBuf, source: toml::de::Error },
    /// The TOML does not have a manifest's shape.
    #[error("{}: not a valid manifest", path.display())]
    Shape { path: std::path::PathBuf, source: serde_json::Error },
    /// The manifest breaks a rule (see [`Manifest::validate`]).
    #[error("{}", path.display())]
    Invalid { path: std::path::PathBuf, source: ManifestError },
}

/// A manifest written as TOML (`plugin.toml`), validated.
pub fn from_toml(manifest_path: &std::path::Path) -> Result<Manifest, FromTomlError> {
    let path = || manifest_path.to_path_buf();
    let text = std::fs::read_to_string(manifest_path).map_err(|source| FromTomlError::Read { path: path(), source })?;
    let mut table: toml::Table = toml::from_str(&text).map_err(|source| FromTomlError::Toml { path: path(), source })?;
    table.entry("manifest_version").or_insert(toml::Value::Integer(MANIFEST_VERSION.into()));
    let value = serde_json::to_value(&table).map_err(|source| FromTomlError::Shape { path: path(), source })?;
    let manifest: Manifest = serde_json::from_value(value).map_err(|source| FromTomlError::Shape { path: path(), source })?;
    manifest.validate().map_err(|source| FromTomlError::Invalid { path: path(), source })?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_cut_anywhere_is_a_clear_error_and_never_a_panic() {
        let fs = crate::plugins::builtin("fs").expect("fs is built in").bytes;
        assert_eq!(Manifest::from_component(fs).unwrap().name, "fs");
        // Cuts inside the big nested module (its code section among them)
        // and near either end.
        for cut in [9, 100, fs.len() / 4, fs.len() / 2, fs.len() * 3 / 4, fs.len() - 1] {
            let err = match Manifest::from_component(&fs[..cut]) {
                Err(e) => e.to_string(),
                // The manifest may sit before the cut; the world check then
                // still walks the rest.
                Ok(_) => match super::super::world::World::detect(&fs[..cut]) {
                    Err(e) => e.to_string(),
                    Ok(world) => panic!("a component cut at {cut} of {} loads as {world}", fs.len()),
                },
            };
            assert!(err.contains("truncated") || err.contains("not a valid"), "cut at {cut}: {err}");
        }
    }
}
