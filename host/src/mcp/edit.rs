//! `chitin mcp add|remove`: one `[mcp_servers.NAME]` entry added to or
//! removed from `config.toml`'s text, everything else (comments, order,
//! formatting) kept byte for byte (`toml_edit`).
//!
//! An entry is checked as the host will read it ([`super::config::parse_one`])
//! before the file is touched, so `add` never writes a config the next
//! start would refuse; the file is replaced whole (a crash leaves the old or
//! the new one) with its permissions kept.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table};

use super::config::{McpConfigError, McpServerConfig, parse_one};

/// Why the config could not be changed.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum EditError {
    /// The config file is not TOML (it is left as it is).
    #[error("{path} is not valid TOML, so it was not changed: {message}")]
    NotToml { path: String, message: String },
    /// The new entry would not be accepted.
    #[error(transparent)]
    Invalid(#[from] McpConfigError),
    /// `add` without `--force` for a name that exists.
    #[error("[mcp_servers.{0}] exists already; remove it first or add --force to replace it")]
    Exists(String),
    /// `remove` of a name that does not exist.
    #[error("no [mcp_servers.{0}] in {1}")]
    Missing(String, String),
    /// `mcp_servers` is there but is not a table.
    #[error("`mcp_servers` in {0} is not a table")]
    NotATable(String),
    /// Reading or writing the file failed.
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
}

/// Adds (or with `replace`, replaces) `[mcp_servers.NAME]` in the config at
/// `path` (created, mode 600, when there is none).
pub fn add(path: &Path, name: &str, entry: &McpServerConfig, replace: bool) -> Result<(), EditError> {
    let value = toml::Value::try_from(entry).map_err(|e| McpConfigError { server: name.into(), message: e.to_string() })?;
    parse_one(name, &value)?;
    let mut doc = read(path)?;
    let shown = path.display().to_string();
    let servers = servers_table(&mut doc, &shown)?;
    if servers.contains_key(name) && !replace {
        return Err(EditError::Exists(name.to_string()));
    }
    servers.insert(name, Item::Table(as_table(&value, entry)));
    write(path, &doc)
}

/// Removes `[mcp_servers.NAME]` (and its subtables) from the config.
pub fn remove(path: &Path, name: &str) -> Result<(), EditError> {
    let shown = path.display().to_string();
    let mut doc = read(path)?;
    let removed = match doc.get_mut("mcp_servers") {
        Some(Item::Table(table)) => table.remove(name).is_some(),
        Some(Item::Value(toml_edit::Value::InlineTable(table))) => table.remove(name).is_some(),
        _ => false,
    };
    if !removed {
        return Err(EditError::Missing(name.to_string(), shown));
    }
    write(path, &doc)
}

fn read(path: &Path) -> Result<DocumentMut, EditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(EditError::Io { what: "reading", path: path.display().to_string(), source }),
    };
    text.parse::<DocumentMut>().map_err(|e| EditError::NotToml { path: path.display().to_string(), message: e.to_string() })
}

/// `mcp_servers` as a table of tables, made when missing (implicit, so no
/// empty `[mcp_servers]` header is written).
fn servers_table<'a>(doc: &'a mut DocumentMut, shown: &str) -> Result<&'a mut Table, EditError> {
    let item = doc.entry("mcp_servers").or_insert_with(|| {
        let mut table = Table::new();
        table.set_implicit(true);
        Item::Table(table)
    });
    if let Item::Value(toml_edit::Value::InlineTable(inline)) = item {
        // `mcp_servers = { … }` becomes tables, so the new entry can be one.
        let mut table = std::mem::take(inline).into_table();
        table.set_implicit(true);
        *item = Item::Table(table);
    }
    item.as_table_mut().ok_or_else(|| EditError::NotATable(shown.to_string()))
}

/// The order keys are written in: what the server is, then how it runs.
const KEY_ORDER: &[&str] = &[
    "url", "transport", "headers", "secrets", "command", "args", "env", "sandbox", "read_only_paths", "network", "tools", "timeout_secs",
    "startup_timeout_secs", "enabled", "oauth",
];

/// The entry as a `[mcp_servers.NAME]` table: its keys in the order the
/// config reference lists them, the defaults left out.
fn as_table(value: &toml::Value, entry: &McpServerConfig) -> Table {
    let defaults = McpServerConfig { url: entry.url.clone(), command: entry.command.clone(), ..McpServerConfig::remote("") };
    let default_value = toml::Value::try_from(&defaults).ok();
    let mut table = Table::new();
    if let toml::Value::Table(map) = value {
        let rank = |key: &str| KEY_ORDER.iter().position(|k| *k == key).unwrap_or(KEY_ORDER.len());
        let mut keys: Vec<(&String, &toml::Value)> = map.iter().collect();
        keys.sort_by_key(|(key, _)| rank(key));
        for (key, value) in keys {
            let is_default = default_value.as_ref().and_then(|d| d.get(key)) == Some(value) && !matches!(key.as_str(), "url" | "command");
            if is_default {
                continue;
            }
            if let Some(item) = to_edit(value) {
                table.insert(key, item);
            }
        }
    }
    table
}

/// A `toml` value as a `toml_edit` one (tables inline: `env = { A = "1" }`).
fn to_edit(value: &toml::Value) -> Option<Item> {
    let text = format!("v = {}", toml::Value::to_string(value));
    let doc = text.parse::<DocumentMut>().ok()?;
    doc.get("v").cloned()
}

fn write(path: &Path, doc: &DocumentMut) -> Result<(), EditError> {
    let io = |what, source| EditError::Io { what, path: path.display().to_string(), source };
    // A new config may hold secrets: readable by its owner only.
    let mode = std::fs::metadata(path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777).unwrap_or(0o600);
    crate::fsutil::write_atomic_mode(path, doc.to_string().as_bytes(), mode).map_err(|(what, e)| io(what, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "# my config\nworkspace = \"ws\"  # keep this comment\n\n[agent]\nmodel = \"m\"\n\n[mcp_servers.old]\n# why old\nurl = \"https://old.example/mcp\"\n\n[mcp_servers.old.oauth]\nscopes = [\"a\"]\n\n[limits]\ntimeout_ms = 5\n";

    #[test]
    fn add_and_remove_keep_everything_else_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let mut entry = McpServerConfig::stdio("npx", vec!["-y".into(), "@modelcontextprotocol/server-filesystem".into()]);
        entry.env.insert("TOKEN".into(), "${GH_TOKEN}".into());
        add(&path, "files", &entry, false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let block = "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem\"]\nenv = { TOKEN = \"${GH_TOKEN}\" }\n";
        assert!(text.contains(block), "{text}");
        // Next to its siblings; the rest untouched.
        assert_eq!(text.replacen(block, "", 1).replace("\n\n\n", "\n\n"), CONFIG, "{text}");
        let config: crate::config::Config = toml::from_str(&text).unwrap();
        let (servers, errors) = super::super::config::parse_all(&config.mcp_servers);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(servers.iter().find(|(n, _)| n == "files").unwrap().1, entry);

        assert!(matches!(add(&path, "files", &entry, false), Err(EditError::Exists(_))));
        remove(&path, "old").unwrap();
        remove(&path, "files").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("# my config\nworkspace = \"ws\"  # keep this comment\n") && text.contains("[limits]\ntimeout_ms = 5"), "{text}");
        assert!(!text.contains("old") && !text.contains("files"), "{text}");
        assert!(matches!(remove(&path, "old"), Err(EditError::Missing(..))));
    }

    #[test]
    fn a_bad_entry_or_a_broken_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let bad = McpServerConfig::remote("ftp://x");
        assert!(matches!(add(&path, "bad", &bad, false), Err(EditError::Invalid(_))));
        assert!(matches!(add(&path, "Bad Name", &McpServerConfig::remote("https://x/mcp"), false), Err(EditError::Invalid(_))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);
        std::fs::write(&path, "[agent\nbroken").unwrap();
        assert!(matches!(add(&path, "ok", &McpServerConfig::remote("https://x/mcp"), false), Err(EditError::NotToml { .. })));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[agent\nbroken");
    }

    #[test]
    fn a_new_config_is_private_and_an_inline_table_grows_into_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        add(&path, "web", &McpServerConfig::remote("https://x/mcp"), false).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions()) & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&path, "mcp_servers = { a = { url = \"https://a/mcp\" } }\n").unwrap();
        add(&path, "b", &McpServerConfig::remote("https://b/mcp"), false).unwrap();
        let config: crate::config::Config = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(config.mcp_servers.len(), 2);
    }
}
